"""
Reply comparison for the differential fuzzer: byte for byte, except where a
slot's normaliser (model.NORMALISERS) says a reply is nondeterministic by
nature. Every normaliser compares the raw bytes of the elements it keeps, so
nothing but the named property (order, a time, a connection id) is relaxed.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))

from harness import RespReader  # noqa: E402


def split_aggregate(raw):
    """(type byte, [raw element]) of an array, set, map (keys and values in
    turn) or push reply; None for anything else (and for null arrays)."""
    kind = raw[:1]
    if kind not in (b"*", b"~", b"%", b">"):
        return None
    end = raw.index(b"\r\n")
    n = int(raw[1:end])
    if n < 0:
        return None
    if kind == b"%":
        n *= 2
    reader = RespReader()
    reader.feed(raw[end + 2:])
    return kind, [reader.get()[1] for _ in range(n)]


def _pairs(elems):
    return [(elems[i], elems[i + 1]) for i in range(0, len(elems) - 1, 2)]


def _int_reply(raw):
    return int(raw[1:-2]) if raw[:1] == b":" else None


def _ttl_close(a, b, unit, slack_ms):
    """TTL, PTTL, EXPIRETIME, PEXPIRETIME: -1 and -2 must match exactly; a
    positive time may differ by slack_ms (plus one unit: TTL rounds)."""
    x, y = _int_reply(a), _int_reply(b)
    return x is not None and y is not None and x > 0 and y > 0 and \
        abs(x - y) <= slack_ms / unit + 1


def _unordered(a, b, grouped):
    """Same type and header, same elements (or pairs) in any order."""
    sa, sb = split_aggregate(a), split_aggregate(b)
    if sa is None or sb is None or sa[0] != sb[0] or len(sa[1]) != len(sb[1]):
        return False
    ea, eb = (_pairs(sa[1]), _pairs(sb[1])) if grouped else (sa[1], sb[1])
    return sorted(ea) == sorted(eb)


def _scan(a, b, grouped):
    """[cursor, elements] of a SCAN that covered everything in one call."""
    sa, sb = split_aggregate(a), split_aggregate(b)
    if sa is None or sb is None or len(sa[1]) != 2 or len(sb[1]) != 2:
        return False
    return sa[0] == sb[0] and sa[1][0] == sb[1][0] and _unordered(sa[1][1], sb[1][1], grouped)


def _hello(a, b):
    """HELLO's map: every field byte for byte but the value of "id"."""
    sa, sb = split_aggregate(a), split_aggregate(b)
    if sa is None or sb is None or sa[0] != sb[0] or len(sa[1]) != len(sb[1]):
        return False
    for (ka, va), (kb, vb) in zip(_pairs(sa[1]), _pairs(sb[1])):
        if ka != kb:
            return False
        if va != vb and not (ka == b"$2\r\nid\r\n" and _int_reply(va) is not None
                             and _int_reply(vb) is not None):
            return False
    return True


def _exec(norms, a, b, slack_ms):
    """EXEC's array: each element compared as its queued command's reply."""
    sa, sb = split_aggregate(a), split_aggregate(b)
    if sa is None or sb is None or sa[0] != sb[0] or len(sa[1]) != len(sb[1]):
        return False
    if len(sa[1]) != len(norms):
        return False
    return all(same(n, x, y, slack_ms) for n, x, y in zip(norms, sa[1], sb[1]))


def same_unsub_group(ra, rb):
    """The confirmations of an UNSUBSCRIBE (or PUNSUBSCRIBE) without
    arguments: [kind, channel, count] each; channels in any order, everything
    else (reply type, kind, the counts going down) byte for byte."""
    sa = [split_aggregate(x) for x in ra]
    sb = [split_aggregate(x) for x in rb]
    if any(x is None or len(x[1]) != 3 for x in sa + sb):
        return False
    rest = [(x[0], x[1][0], x[1][2]) for x in sa] == [(x[0], x[1][0], x[1][2]) for x in sb]
    return rest and sorted(x[1][1] for x in sa) == sorted(x[1][1] for x in sb)


def same_publish_group(ra, rb):
    """A PUBLISH's reply and the messages it delivers to its own client: the
    reply (the one that is not a push) at the same place, byte for byte; the
    messages in any order."""
    def split(rs):
        return ([(i, x) for i, x in enumerate(rs) if not x.startswith(b">")],
                sorted(x for x in rs if x.startswith(b">")))
    return split(ra) == split(rb)


def same_group(norm, ra, rb):
    """A group of replies that starts with a ("unsub", n), ("pushes", n) or
    ("publish", n) slot: compared as a whole."""
    if len(ra) != len(rb):
        return False
    if norm[0] == "unsub":
        return same_unsub_group(ra, rb)
    if norm[0] == "publish":
        return same_publish_group(ra, rb)
    return sorted(ra) == sorted(rb)


def same(norm, a, b, slack_ms):
    """True when reply bytes a (direct) and b (through ttlguard) agree under
    the slot's normaliser. slack_ms: how far apart in time the two runs of a
    command may be (times and TTLs may differ by that much)."""
    if a == b:
        return True
    if isinstance(norm, tuple):
        if norm[0] == "ttl":
            return _ttl_close(a, b, norm[1], slack_ms)
        if norm[0] == "exec":
            return _exec(norm[1], a, b, slack_ms)
    if norm in ("unordered", "pairs"):
        return _unordered(a, b, norm == "pairs")
    if norm in ("scan", "scanpairs"):
        return _scan(a, b, norm == "scanpairs")
    if norm == "hello":
        return _hello(a, b)
    return False
