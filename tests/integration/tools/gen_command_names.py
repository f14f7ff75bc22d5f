#!/usr/bin/python3
"""Print the names a redis-server or valkey-server knows, as the body of
known_names[] in proxy/commands.c.

    tests/integration/tools/gen_command_names.py [PORT] [--missing]   (default 6379)

Only top-level names, lowercase: a subcommand ("config|get") is never argv[0],
and the table's names are lowercase (Redis 8 lists its vector set commands as
"VADD", ...). Redis 7.0.15's names are the N("...") block of known_names[];
the names of later servers go after it with the versions that have them
({ "name", R80, V90 }). test_command_table.py checks the array against each
server it runs on, so rerun this on a new server and add what it lists that
known_names[] lacks: --missing prints only those, each with the "since" of
the server's own COMMAND DOCS (Redis 8.6.3 names XIDMPRECORD's 8.6.2 there,
where redis.io says 8.8.0: the server's word is the one to take).
"""

import os
import re
import sys

import redis

COMMANDS_C = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "..", "..", "..", "proxy", "commands.c")


def known_names():
    """The names known_names[] in proxy/commands.c has, for any server."""
    with open(COMMANDS_C) as f:
        src = f.read()
    start = src.index("known_names[] = {")
    return set(re.findall(r'"([^"|]+)"', src[start:src.index("};", start)]))


def print_missing(r, names):
    """Names the server has and known_names[] lacks, with COMMAND DOCS' since."""
    have = known_names()
    for n in names:
        if n in have:
            continue
        docs = r.execute_command("COMMAND DOCS", n)
        doc = dict(zip(docs[1][::2], docs[1][1::2])) if len(docs) == 2 else {}
        since = doc.get(b"since", b"?").decode()
        print('    { "%s", ... },  /* since %s */' % (n, since))


def main():
    args = [a for a in sys.argv[1:] if a != "--missing"]
    port = int(args[0]) if args else 6379
    r = redis.Redis(host="127.0.0.1", port=port)
    # "COMMAND LIST" as one word: redis-py splits it, and skips the reply
    # callback it has for COMMAND (which expects COMMAND INFO replies).
    names = sorted({n.decode().lower() for n in r.execute_command("COMMAND LIST")
                    if b"|" not in n})
    if "--missing" in sys.argv[1:]:
        print_missing(r, names)
        return
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
