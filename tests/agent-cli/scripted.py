"""What every scripted model server here shares: the script (its turns, handed out one per
main-loop request, and anything else it says), the request log, the shell text of an argv, and
the command line that starts a server on loopback and writes the port it chose.

    python3 model_X.py --script script.json --log requests.jsonl --port-file port.txt [--port N]

Python 3.11 standard library only.
"""

import argparse
import json
import os
import shlex
import threading
from http.server import ThreadingHTTPServer

# What a main-loop request is answered with once the script has run out.
DONE = {"text": "done"}


class Script:
    """The script file's turns, handed out in order, and the log of every request."""

    def __init__(self, path, log_path):
        with open(path, encoding="utf-8") as f:
            self.data = json.load(f)
        self.turns = list(self.data.get("turns", []))
        self.taken = 0
        self.log_path = log_path
        self.lock = threading.Lock()

    def take_turn(self):
        """The next turn and its 0-based place in the script, or (None, DONE) once it ran out."""
        with self.lock:
            index = self.taken
            if index < len(self.turns):
                self.taken += 1
                return index, self.turns[index]
            return None, DONE

    def peek_turn(self):
        """The next turn, without taking it (None once the script ran out)."""
        with self.lock:
            return self.turns[self.taken] if self.taken < len(self.turns) else None

    def log(self, entry):
        with self.lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def shell_text(command):
    """The shell command line of an argv list such as ["bash", "-lc", "ls"]."""
    if isinstance(command, str):
        return command
    if len(command) == 3 and command[1] in ("-lc", "-c"):
        return command[2]
    return shlex.join(command)


def serve(handler, description, attribute="script", make=Script):
    """Reads the command line, gives `handler` the script as `attribute` (made by `make`), and
    serves on 127.0.0.1 until killed, once the chosen port is written (whole) to --port-file."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--script", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    setattr(handler, attribute, make(args.script, args.log))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
