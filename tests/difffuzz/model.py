"""
What one client connection owes: a model of Redis 7.0's connection state
(protocol, MULTI, CLIENT REPLY, pub/sub subscriptions) that says how many
replies each request gets and how each reply is compared.

The model is checked against the direct server on every batch: when the
number of replies differs from the model's count (a server that is not Redis
7.0, a shrinking step that made a sequence the model does not cover), or the
model cannot follow a request (Unsupported), the batch is compared raw
instead: the proxy's replies against the server's, position by position
(difffuzz.compare_raw, compare.first_raw_difference). Nothing is skipped.

Comparison of one reply ("slot") is byte for byte, except for the few replies
that are nondeterministic by nature (see NORMALISERS below); each exception is
narrow and applies to exactly one command's reply.
"""

from fnmatch import fnmatchcase

# Commands Redis 7.0 still runs for a RESP2 client in subscribed state
# (processCommand: "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT /
# RESET are allowed in this context").
RESP2_SUBSCRIBED_OK = {b"PING", b"SUBSCRIBE", b"PSUBSCRIBE", b"UNSUBSCRIBE",
                       b"PUNSUBSCRIBE", b"SSUBSCRIBE", b"SUNSUBSCRIBE", b"QUIT", b"RESET"}

# Queued inside MULTI, these change connection state when EXEC runs them;
# README "Limits" (Protocol state is mirrored from the requests): "their effects
# at EXEC time (a SELECT, HELLO or SUBSCRIBE run by EXEC) are not mirrored".
# A case that runs one from EXEC is outside what the proxy promises.
EXEC_STATE_CHANGERS = {b"SELECT", b"HELLO", b"SUBSCRIBE", b"PSUBSCRIBE", b"UNSUBSCRIBE",
                       b"PUNSUBSCRIBE", b"CLIENT", b"SWAPDB", b"RESET"}

# Replies that are not the same on two servers by nature. The value says how
# they are compared instead (documented in compare_slot):
#   ("ttl", unit): time left or expiry time in units of `unit` ms; -1/-2
#       exact, positive values within the case's slack (compare.same): the
#       direct and proxied runs of a command are not the same instant
#   "unordered": an array of members from a hash table; Redis seeds its hash
#       function randomly per process, so the order differs between servers
#   "pairs": field/value pairs from a hash table (HGETALL), order as above
#   "scan": [cursor, elements] of a full SCAN (COUNT 1000): elements unordered
#   "scanpairs": the same for HSCAN/ZSCAN (field/value pairs)
#   ("unsub", n): the n confirmations of UNSUBSCRIBE or PUNSUBSCRIBE without
#       arguments, one per channel in hash order: compared as a group
#   ("pushes", n): the n messages one PUBLISH delivers to this client when
#       several of its patterns match (Redis walks a dict of patterns): compared
#       as a group, in any order
#   ("publish", n): those messages and PUBLISH's own reply, which Redis 7.0
#       sends after them and Redis 7.2+ before: the reply in the same place on
#       both sides, the messages in any order (under CLIENT REPLY OFF|SKIP the
#       group is ("pushes", n - 1))
#   "push", "grouped": the rest of such a group (a lone "push" is exact)
#   "hello": HELLO's reply carries the connection's "id" (CLIENT ID), which
#       counts every connection the server saw (ttlguard's own included)
NORMALISERS = {
    b"TTL": ("ttl", 1000), b"EXPIRETIME": ("ttl", 1000),
    b"PTTL": ("ttl", 1), b"PEXPIRETIME": ("ttl", 1),
    b"SMEMBERS": "unordered", b"SINTER": "unordered", b"SUNION": "unordered",
    b"SDIFF": "unordered", b"KEYS": "unordered", b"HKEYS": "unordered",
    b"HVALS": "unordered", b"HGETALL": "pairs",
    b"SCAN": "scan", b"SSCAN": "scan", b"HSCAN": "scanpairs", b"ZSCAN": "scanpairs",
    b"HELLO": "hello",
}


def request_normaliser(args):
    """How the reply to a request is compared: "exact" or a NORMALISERS entry."""
    return NORMALISERS.get(args[0].upper(), "exact") if args else "exact"


class Unsupported(Exception):
    """The sequence leaves what the model (or the proxy, by README) covers."""


class ConnModel:
    """Connection state of one client, advanced request by request."""

    def __init__(self):
        self.proto = 2
        self.multi = False
        self.queued = []        # normalisers of the commands queued in MULTI
        self.queued_names = []  # their names, to spot EXEC_STATE_CHANGERS
        self.reply = "on"       # on | off | skip (the next command's reply)
        self.subs = set()
        self.psubs = set()

    def subscribed(self):
        return bool(self.subs or self.psubs)

    def step(self, args):
        """The slots (normalisers, one per reply owed) for one request, and
        the state after it. An empty inline line is args == []: Redis resets
        the client without running a command."""
        before = self.reply
        slots = self._dispatch(args) if args else []
        if before != "on" and not self._reply_forced(args, before):
            # CLIENT REPLY OFF|SKIP drop replies, not the pushes of published
            # messages (Redis sets CLIENT_PUSHING for those).
            slots = [("pushes", s[1] - 1) if s[0] == "publish" else s for s in slots
                     if s == "push" or s[0] in ("pushes", "publish")]
        # resetClient(): a pending skip is used up; a SKIP just run arms it.
        if self.reply == "skip":
            self.reply = "on"
        if self.reply == "skip-next":
            self.reply = "skip"
        return slots

    @staticmethod
    def _reply_forced(args, before):
        """CLIENT REPLY ON clears the reply flags before replying; RESET
        clears OFF, not the skip of the command it is itself
        (clearClientConnectionState)."""
        up = [a.upper() for a in args[:3]]
        return (up == [b"RESET"] and before == "off") or up == [b"CLIENT", b"REPLY", b"ON"]

    def _dispatch(self, args):
        name = args[0].upper()
        if self.proto == 2 and self.subscribed() and name not in RESP2_SUBSCRIBED_OK:
            return ["exact"]
        if self.multi and name not in (b"EXEC", b"DISCARD", b"MULTI", b"WATCH",
                                       b"QUIT", b"RESET"):
            self.queued.append(request_normaliser(args))
            self.queued_names.append(name)
            return ["exact"]
        handler = getattr(self, "_cmd_" + name.decode("latin-1").lower().replace("-", "_"),
                          None) if name.isalpha() else None
        return handler(args) if handler else [request_normaliser(args)]

    # -- transactions -----------------------------------------------------

    def _cmd_multi(self, args):
        if len(args) == 1 and not self.multi:
            self.multi, self.queued, self.queued_names = True, [], []
        return ["exact"]

    def _cmd_exec(self, args):
        if not self.multi or len(args) != 1:
            return ["exact"]
        changers = EXEC_STATE_CHANGERS.intersection(self.queued_names)
        if changers:
            raise Unsupported("EXEC runs %s (README Limits: not mirrored)"
                              % b",".join(sorted(changers)).decode())
        norms, self.multi, self.queued, self.queued_names = self.queued, False, [], []
        return [("exec", tuple(norms))]

    def _cmd_discard(self, args):
        if self.multi and len(args) == 1:
            self.multi, self.queued, self.queued_names = False, [], []
        return ["exact"]

    # -- connection state --------------------------------------------------

    def _cmd_reset(self, args):
        if len(args) == 1:
            self.__init__()
        return ["exact"]

    def _cmd_hello(self, args):
        if len(args) == 2 and args[1] in (b"2", b"3"):
            self.proto = int(args[1])
        return ["hello"]

    def _cmd_client(self, args):
        if len(args) == 3 and args[1].upper() == b"REPLY":
            mode = args[2].upper()
            if mode == b"ON":
                self.reply = "on"
            elif mode == b"OFF":
                self.reply = "off"
                return []
            elif mode == b"SKIP":
                if self.reply != "off":
                    self.reply = "skip-next"
                return []
        return ["exact"]

    # -- pub/sub -------------------------------------------------------------

    def _subscribe(self, args, into):
        if len(args) < 2:
            return ["exact"]
        into.update(args[1:])
        return ["exact"] * (len(args) - 1)

    def _unsubscribe(self, args, outof):
        if len(args) == 1:
            # Redis walks the client's channel dict: the order is hash order.
            n = max(1, len(outof))
            outof.clear()
            return [("unsub", n)] + ["grouped"] * (n - 1) if n > 1 else ["exact"]
        outof.difference_update(args[1:])
        return ["exact"] * (len(args) - 1)

    def _cmd_subscribe(self, args):
        return self._subscribe(args, self.subs)

    def _cmd_psubscribe(self, args):
        return self._subscribe(args, self.psubs)

    def _cmd_unsubscribe(self, args):
        return self._unsubscribe(args, self.subs)

    def _cmd_punsubscribe(self, args):
        return self._unsubscribe(args, self.psubs)

    def _cmd_publish(self, args):
        """A RESP3 client subscribed to the channel gets its own message as a
        push (one per matching channel and pattern), before PUBLISH's reply
        in Redis 7.0, after it in 7.2+."""
        if len(args) != 3 or self.proto != 3:
            return ["exact"]
        ch = args[1].decode("latin-1")
        n = int(args[1] in self.subs)
        n += sum(fnmatchcase(ch, p.decode("latin-1")) for p in self.psubs)
        if n > 1:
            # Patterns are matched walking a dict of them: hash order.
            return [("publish", n + 1)] + ["push"] * (n - 1) + ["exact"]
        return ["push"] * n + ["exact"]

    # -- batch boundaries ----------------------------------------------------

    def epilogue(self):
        """Requests that bring the connection to a state where a PING round
        trip is answered: MULTI closed, replies on."""
        out = []
        if self.multi:
            out.append([b"DISCARD"])
        if self.reply != "on":
            out.append([b"CLIENT", b"REPLY", b"ON"])
        return out
