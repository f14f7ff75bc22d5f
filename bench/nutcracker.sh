# bench/nutcracker.sh: the nutcracker (twemproxy) config the benchmarks measure against,
# sourced by bench/run.sh and bench/large.sh.
#
# nutcracker_yml FILE LISTEN_PORT REDIS_PORT: one pool, one server. preconnect: connect at
# start, not on the first request. server_connections 1 is the default: nutcracker
# multiplexes every client over that one connection, as ttlguard's shared mode does.
nutcracker_yml() {
    cat >"$1" <<YML
bench:
  listen: 127.0.0.1:$2
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  timeout: 10000
  servers:
   - 127.0.0.1:$3:1
YML
}
