#!/usr/bin/env bash
# Test hosts on this machine: network namespaces joined by veth pairs to a bridge, each with an
# address of its own, for running ranks "on separate machines" (docs/pprun.md, Clusters). Needs
# root. Nothing in this machine's own network namespace changes: the bridge lives in a namespace
# of its own, and every address exists only inside the namespaces made here.
#
#   scripts/test-hosts.sh up NAME N        hosts NAME-1 .. NAME-N: in NAME-K, interface eth0 at
#                                          10.200.0.K/24 and lo; the bridge in NAME-net; and
#                                          /etc/netns/NAME-K/hosts, which `ip netns exec` shows as
#                                          /etc/hosts: hostJ is 10.200.0.J
#   scripts/test-hosts.sh exec NAME K CMD..  runs CMD on host K: in its network namespace (ip
#                                          netns exec) and a UTS namespace of its own whose host
#                                          name is hostK, so that the host name resolves to the
#                                          host's address as on a real machine
#   scripts/test-hosts.sh cut NAME K       unplugs host K: its cable at the bridge goes down, so
#                                          packets to and from it are lost (no reset, no error)
#   scripts/test-hosts.sh mend NAME K      plugs it back in
#   scripts/test-hosts.sh down NAME        kills every process on the hosts, deletes the
#                                          namespaces and the hosts files; safe to repeat
#
# NAME: letters, digits, '-' and '_' (a namespace name; the tests add their process id).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
name=$2
[[ $name =~ ^[A-Za-z0-9_-]{1,40}$ ]] || { echo "test-hosts: bad NAME '$name'" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
  echo "test-hosts: needs root (network namespaces)" >&2
  exit 2
fi
net=$name-net

host_number() {
  [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 250 ] ||
    { echo "test-hosts: bad host number '$1' (1..250)" >&2; exit 2; }
}

# The namespaces of NAME, as `ip netns list` shows them.
namespaces() {
  ip netns list | awk '{print $1}' | grep -E "^${name}-([0-9]+|net)\$" || true
}

case $cmd in
up)
  [ $# -eq 3 ] || usage
  n=$3
  host_number "$n"
  ip netns add "$net"
  ip -n "$net" link set lo up
  ip -n "$net" link add br0 type bridge
  ip -n "$net" link set br0 up
  for k in $(seq "$n"); do
    ns=$name-$k
    ip netns add "$ns"
    ip -n "$net" link add "p$k" type veth peer name eth0 netns "$ns"
    ip -n "$net" link set "p$k" master br0
    ip -n "$net" link set "p$k" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.200.0.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      for j in $(seq "$n"); do echo "10.200.0.$j host$j"; done
    } >"/etc/netns/$ns/hosts"
  done
  # Wait until every host reaches the bridge (a new link takes a moment to come up).
  for k in $(seq "$n"); do
    for _ in $(seq 50); do
      state=$(ip -n "$name-$k" -o link show eth0)
      [[ $state == *LOWER_UP* ]] && break
      sleep 0.1
    done
  done
  ;;
exec)
  [ $# -ge 4 ] || usage
  host_number "$3"
  k=$3
  shift 3
  exec ip netns exec "$name-$k" unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$k" "$@"
  ;;
cut | mend)
  [ $# -eq 3 ] || usage
  host_number "$3"
  ip -n "$net" link set "p$3" "$([ "$cmd" = cut ] && echo down || echo up)"
  ;;
down)
  [ $# -eq 2 ] || usage
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  done
  for ns in $(namespaces); do
    # A process killed a moment ago may still hold its namespace: deleting it then only unlinks
    # the name, and the namespace goes when the last process does.
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  for d in /etc/netns/"$name"-*; do
    [ -d "$d" ] && [[ ${d#/etc/netns/} =~ ^${name}-[0-9]+$ ]] && rm -rf "$d"
  done
  rmdir /etc/netns 2>/dev/null || true
  ;;
*)
  usage
  ;;
esac
