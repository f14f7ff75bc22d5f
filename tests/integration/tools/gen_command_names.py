#!/usr/bin/python3
"""Print the names redis-server knows, as the body of known_commands[] in
proxy/commands.c.

    tests/integration/tools/gen_command_names.py [PORT]     (default 6379)

Only top-level names: a subcommand ("config|get") is never argv[0].
test_command_table.py checks the array in commands.c against the server, so
rerun this and paste its output when the server version changes.
"""

import sys

import redis


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
    r = redis.Redis(host="127.0.0.1", port=port)
    # "COMMAND LIST" as one word: redis-py splits it, and skips the reply
    # callback it has for COMMAND (which expects COMMAND INFO replies).
    names = sorted(n.decode() for n in r.execute_command("COMMAND LIST") if b"|" not in n)
    line = "   "
    for n in names:
        item = ' "%s",' % n
        if len(line) + len(item) > 100:
            print(line)
            line = "   "
        line += item
    print(line)
    print("    /* %d names, from COMMAND LIST of redis-server %s */"
          % (len(names), r.info("server")["redis_version"]))


if __name__ == "__main__":
    main()
