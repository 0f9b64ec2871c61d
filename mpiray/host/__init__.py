"""The host a rank runs on: its share of the CPUs, GPUs and memory (resources.py), its addresses and
port blocks (network.py, portblocks.py), the processes it starts and stops (processes.py) and the guard that tidies up
after a rank that died (guard.py)."""
