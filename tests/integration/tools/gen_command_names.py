#!/usr/bin/python3
"""Print the names a redis-server or valkey-server knows, as the body of
known_names[] in proxy/commands.c.

    tests/integration/tools/gen_command_names.py [PORT]     (default 6379)

Only top-level names, lowercase: a subcommand ("config|get") is never argv[0],
and the table's names are lowercase (Redis 8 lists its vector set commands as
"VADD", ...). Redis 7.0.15's names are the N("...") block of known_names[];
the names of later servers go after it with the versions that have them
({ "name", R80, V90 }). test_command_table.py checks the array against each
server it runs on, so rerun this on a new server and add what it lists that
known_names[] lacks.
"""

import sys

import redis


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
    r = redis.Redis(host="127.0.0.1", port=port)
    # "COMMAND LIST" as one word: redis-py splits it, and skips the reply
    # callback it has for COMMAND (which expects COMMAND INFO replies).
    names = sorted({n.decode().lower() for n in r.execute_command("COMMAND LIST")
                    if b"|" not in n})
    line = "   "
    for n in names:
        item = ' N("%s"),' % n
        if len(line) + len(item) > 100:
            print(line)
            line = "   "
        line += item
    print(line)
    info = r.info("server")
    if "valkey_version" in info:
        server = "valkey-server %s" % info["valkey_version"]
    else:
        server = "redis-server %s" % info["redis_version"]
    print("    /* %d names, from COMMAND LIST of %s */" % (len(names), server))


if __name__ == "__main__":
    main()
