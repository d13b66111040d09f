#!/usr/bin/env bash
# Instruction counts of roundtrip's filter compiler against libpcap's (tcpdump -d), per expression and link
# type, and the sum over the set: the expressions of docs/capture-filter.md plus port and host lists of 10 to 200
# terms. Counts are deterministic (no rounds needed); the script also times the compile of a 1,600-term chain.
#
# Our count: `roundtrip capture bpf --linktype L EXPR | wc -l` (one line per instruction, as `tcpdump -d`);
# libpcap's: `tcpdump -d -y Y EXPR | wc -l`. An expression either side refuses for a link type is listed and
# left out of that link type's sums.
#
# Usage: bench/bpf_size.sh            (RT=path/to/roundtrip, default target/release/roundtrip)
#        SIZES="10 50" bench/bpf_size.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RT=${RT:-$ROOT/target/release/roundtrip}
SIZES=${SIZES:-10 50 100 160 200}
command -v tcpdump >/dev/null || { echo "bpf_size.sh: tcpdump is needed" >&2; exit 2; }
[ -x "$RT" ] || { echo "bpf_size.sh: no roundtrip binary at $RT (cargo build --release, or set RT)" >&2; exit 2; }

exprs=(
  "port 1521" "host 10.0.0.5 and tcp" "tcp port 5432 or tcp port 6379" "net 10.0.0.0/8" "not port 22"
  "host 10.0.0.5" "tcp" "udp port 53" "ip" "ip6" "arp" "icmp6" "port 80 or 443"
  "host 10.0.0.1 and not 10.0.0.2" "tcp or udp and port 53" "net 192.168" "net 10.0.0.0 mask 255.0.0.0"
  "net fd00::/8" "portrange 1-1024" "src port 80" "less 100" "greater 1000"
  "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0" "tcp[13] & 2 != 0" "ip[6:2] & 0x1fff != 0"
  "icmp[icmptype] = icmp-echo" "ip proto 17" "vlan 100 and port 80"
  "ether host 1:2:3:4:5:6" "ether src 1:2:3:4:5:6" "ether broadcast" "ether multicast" 'ether proto \arp'
  "ip broadcast" "ip multicast" "ip6 multicast"
)
list() { # list N WORDS... : "W 1 or W 2 or ..." with ports 1..N or addresses 10.0.x.y
  local n=$1 kind=$2; shift 2
  local out="" i v
  for ((i = 1; i <= n; i++)); do
    if [ "$kind" = host ]; then v="10.0.$((i / 250)).$((i % 250 + 1))"; else v=$((1000 + i)); fi
    out+="${out:+ or }$* $v"
  done
  printf '%s' "$out"
}
for n in $SIZES; do
  exprs+=("$(list "$n" port port)" "$(list "$n" host host)" "$(list "$n" port tcp port)"
          "$(list "$n" port dst port)" "$(list "$n" host src host)")
done

short() { local e=$1; [ ${#e} -gt 48 ] && e="${e:0:24}...${e: -20} ($(wc -w <<<"$1") words)"; printf '%s' "$e"; }
for pair in "EN10MB ethernet" "LINUX_SLL2 linux-sll2"; do
  set -- $pair
  y=$1 link=$2 sum_ours=0 sum_pcap=0 skipped=0
  printf '\n%-62s %7s %7s %6s   (-y %s / --linktype %s)\n' expression ours libpcap ratio "$y" "$link"
  for e in "${exprs[@]}"; do
    ours=$("$RT" capture bpf --linktype "$link" "$e" 2>/dev/null | wc -l) || ours=0
    pcap=$(tcpdump -d -y "$y" "$e" 2>/dev/null | wc -l) || pcap=0
    if [ "$ours" -eq 0 ] || [ "$pcap" -eq 0 ]; then
      printf '%-62s %7s %7s %6s\n' "$(short "$e")" "${ours/#0/refused}" "${pcap/#0/refused}" -
      skipped=$((skipped + 1))
      continue
    fi
    sum_ours=$((sum_ours + ours)) sum_pcap=$((sum_pcap + pcap))
    printf '%-62s %7d %7d %6.2f\n' "$(short "$e")" "$ours" "$pcap" "$(echo "$ours / $pcap" | bc -l)"
  done
  printf '%-62s %7d %7d %6.3f   (%d left out: refused by one side)\n' "SUM $y" "$sum_ours" "$sum_pcap" \
    "$(echo "$sum_ours / $sum_pcap" | bc -l)" "$skipped"
done

echo
# libpcap's own compile of 1,600 terms takes minutes and a gigabyte: its count is asked up to 500 only.
for n in 160 500 1600; do
  e=$(list "$n" port port)
  start=$(date +%s.%N)
  if out=$("$RT" capture bpf "$e" 2>&1); then c=$(wc -l <<<"$out"); else c="refused (${out: -60})"; fi
  t=$(echo "$(date +%s.%N) - $start" | bc -l)
  pcap=-
  [ "$n" -le 500 ] && pcap=$(tcpdump -d -y EN10MB "$e" | wc -l)
  printf '%5d-port chain: ours %s, libpcap %s; our compile %.3f s\n' "$n" "$c" "$pcap" "$t"
done
