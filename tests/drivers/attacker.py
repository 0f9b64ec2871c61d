"""What a hostile neighbour on a shared node tries against a job's private dirs; run as another uid.

    python3 -I attacker.py SECRET_FILE PRIVATE_DIR...

Prints one JSON object: for each attack, "blocked" (PermissionError), "done" (it worked: the job is
exposed) or the name of another error. Standard library only (it runs with the system python3).
"""

import json
import os
import sys


def attempt(action) -> str:
    try:
        action()
    except PermissionError:
        return "blocked"
    except OSError as error:
        return type(error).__name__
    return "done"


def attacks(private: str, secret: str) -> dict:
    ray = os.path.join(private, "ray")
    session = os.path.join(ray, "session_latest")
    return {
        "list the private dir": lambda: os.listdir(private),
        "read the token": lambda: open(os.path.join(private, "auth_token")).read(),
        "delete the token": lambda: os.unlink(os.path.join(private, "auth_token")),
        "plant a token": lambda: open(os.path.join(private, "auth_token.new"), "w").close(),
        "rename Ray's dir": lambda: os.rename(ray, ray + ".gone"),
        "list Ray's dir": lambda: os.listdir(ray),
        "replace raylet's socket": lambda: os.unlink(os.path.join(session, "sockets", "raylet")),
        "plant a socket": lambda: open(os.path.join(session, "sockets", "fake"), "w").close(),
        "plant a log symlink to a secret": lambda: os.symlink(secret, os.path.join(session, "logs", "x.err")),
        "plant a FIFO in the logs": lambda: os.mkfifo(os.path.join(session, "logs", "y.out")),
    }


if __name__ == "__main__":
    secret, dirs = sys.argv[1], sys.argv[2:]
    report = {"uid": os.getuid(), "results": {}}
    for private in dirs:
        for name, action in attacks(private, secret).items():
            report["results"][f"{private}: {name}"] = attempt(action)
    print(json.dumps(report), flush=True)
