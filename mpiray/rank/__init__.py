"""A rank's life, the same for every front end: life.run(config, leader).

Bottom to top: signals (stop signals), messages (tags and payloads), mpi (polled MPI), state (Rank, the
Leader and Role contracts, the shared timings), slots (join slots), hostsplit (the ranks of a host agree
on its split), nodestart (what this rank gathers to start its Ray node), ownnode (that node, as the
protocol drives it), head / worker / joiner (the
roles), teardown (the end of a rank), life (the whole of it, top-down).
"""
