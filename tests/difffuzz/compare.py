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


# --------------------------------------------------------------------------
# Batches the connection model does not follow: compared raw
# --------------------------------------------------------------------------

# RESP2 confirmations of an UNSUBSCRIBE / PUNSUBSCRIBE (first element).
_UNSUB_KINDS = (b"$11\r\nunsubscribe\r\n", b"$12\r\npunsubscribe\r\n")


def batch_normalisers(norms):
    """The normalisers of a batch's requests (model.request_normaliser of
    each), as the set a raw comparison may use: each names a reply that
    differs between two servers by nature."""
    out = set()
    for n in norms:
        if n != "exact":
            out.add(n)
    return out


def _pubsub_reply(raw):
    """A RESP3 push, or a RESP2 (p)unsubscribe confirmation: the replies a
    server sends in an order of its own (the walk of a dict)."""
    if raw[:1] == b">":
        return True
    if raw[:1] != b"*":
        return False
    sa = split_aggregate(raw)
    return sa is not None and len(sa[1]) == 3 and sa[1][0] in _UNSUB_KINDS


def _unsub(raw):
    sa = split_aggregate(raw)
    return sa is not None and len(sa[1]) == 3 and sa[1][0] in _UNSUB_KINDS


def _lax(a, b, norms, slack_ms, exec_ok):
    """One reply of a raw batch: the same bytes, or the same under one of the
    batch's normalisers; with exec_ok, an array compared element by element
    the same way (EXEC's reply)."""
    if a == b or any(same(n, a, b, slack_ms) for n in norms):
        return True
    if exec_ok and a[:1] == b"*" == b[:1]:
        sa, sb = split_aggregate(a), split_aggregate(b)
        if sa is not None and sb is not None and len(sa[1]) == len(sb[1]):
            return all(_lax(x, y, norms, slack_ms, False) for x, y in zip(sa[1], sb[1]))
    return False


def first_raw_difference(ra, rb, norms, slack_ms, exec_ok=True):
    """Index of the first reply where the raw lists ra (direct) and rb
    (through ttlguard) differ, or None when they agree: position by
    position, byte for byte, except that
      - a reply may differ as one of the batch's normalisers allows (norms:
        batch_normalisers), or, with exec_ok, an array element by element so;
      - a run of pub/sub replies (RESP3 pushes, RESP2 unsubscribe
        confirmations) is taken as a group: the same replies in any order
        (confirmations: compare.same_unsub_group).
    A list longer than the other differs where the shorter one ends."""
    i = 0
    n = min(len(ra), len(rb))
    while i < n:
        a, b = ra[i], rb[i]
        if _lax(a, b, norms, slack_ms, exec_ok):
            i += 1
            continue
        if _pubsub_reply(a) and _pubsub_reply(b):
            ja = i
            while ja < len(ra) and _pubsub_reply(ra[ja]):
                ja += 1
            jb = i
            while jb < len(rb) and _pubsub_reply(rb[jb]):
                jb += 1
            ga, gb = ra[i:ja], rb[i:jb]
            if all(_unsub(x) for x in ga + gb):
                ok = same_unsub_group(ga, gb) if len(ga) == len(gb) else False
            else:
                ok = sorted(ga) == sorted(gb)
            if ok:
                i = ja
                continue
        return i
    return None if len(ra) == len(rb) else n
