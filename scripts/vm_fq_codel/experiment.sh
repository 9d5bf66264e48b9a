#!/bin/sh
# Runs inside the VM: the AQM benchmark's bottleneck (docs/qdisc.md) with Linux's own
# fq_codel. Used with the CAKE reference's VM (Debian's 6.1 kernel under QEMU): copy that
# folder to a scratch directory, put this file in place of its experiment.sh, then
#   ./build_initrd.sh && ./run_vm.sh NAME "arms=udp2,noudp,udp09 test=30" 900
#   python3 <repo>/scripts/vm_fq_codel/parse.py logs/NAME.raw.txt
#   client(10.201.1.1) -- [rl] router [rw] -- [lr] line [ls] -- (10.201.2.1) server
# router rw egress: HTB 10 Mbit/s, leaf fq_codel limit 1000 (the discipline under test);
# line: netem 22 ms each way (base RTT about 45 ms). Traffic from the client: eight bulk
# uploads, one bulk upload (CUBIC), an unresponsive UDP stream of 1000-byte IP datagrams
# (arm udp2: 2 Mbit/s, udp09: 0.9 Mbit/s, noudp: none), a ping every 100 ms. Every
# 0.25 s: the fq_codel qdisc and its flow classes (backlog, CoDel count, ldelay).
S=10.201.2.1
B=/opt/bin
ip() { $B/ip "$@"; }
tc() { $B/tc "$@"; }
ns() { n=$1; shift; nsenter --net=/run/netns/$n "$@"; }
now() { cut -d' ' -f1 /proc/uptime; }
sec() { echo "=== BEGIN $1 ==="; }
endsec() { echo "=== END $1 ==="; }
run() { echo "+ $*"; "$@"; }

teardown() {
  killall iperf3 2>/dev/null; sleep 1
  for n in client router line server; do ip netns del $n 2>/dev/null; done
  sleep 1
}

setup() {
  for n in client router line server; do ip netns add $n; ip -n $n link set lo up; done
  ip link add c0 netns client type veth peer name rl netns router
  ip link add rw netns router type veth peer name lr netns line
  ip link add ls netns line type veth peer name s0 netns server
  ip -n client addr add 10.201.1.1/24 dev c0
  ip -n router addr add 10.201.1.254/24 dev rl
  ip -n router addr add 10.201.3.1/24 dev rw
  ip -n line   addr add 10.201.3.2/24 dev lr
  ip -n line   addr add 10.201.2.254/24 dev ls
  ip -n server addr add 10.201.2.1/24 dev s0
  for pair in client:c0 router:rl router:rw line:lr line:ls server:s0; do
    n=${pair%%:*}; d=${pair##*:}
    ns $n $B/ethtool -K $d tso off gso off gro off tx off rx off >/dev/null 2>&1 || ns $n $B/ethtool -K $d tso off gso off gro off
    ip -n $n link set $d up
  done
  ip -n client route add default via 10.201.1.254
  ip -n router route add default via 10.201.3.2
  ip -n line   route add 10.201.1.0/24 via 10.201.3.1
  ip -n server route add default via 10.201.2.254
  ns router sysctl -qw net.ipv4.ip_forward=1
  ns line   sysctl -qw net.ipv4.ip_forward=1
  run tc -n line qdisc add dev ls root netem delay 22ms limit 100000
  run tc -n line qdisc add dev lr root netem delay 22ms limit 100000
  run tc -n router qdisc add dev rw root handle 1: htb default 1
  run tc -n router class add dev rw parent 1: classid 1:1 htb rate 10mbit ceil 10mbit quantum 1514
  run tc -n router qdisc add dev rw parent 1:1 handle 10: fq_codel limit 1000
}

sampler() { # $1 seconds: one tc process reads the requests as they come
  end=$(( $1 * 4 ))
  i=0
  while [ $i -lt $end ]; do
    echo "qdisc show dev rw"
    echo "class show dev rw"
    i=$((i + 1))
    sleep 0.25
  done | ns router $B/tc -s -b -
}

arm() { # $1 name $2 udp rate (0: none)
  a=$1; T=${TEST:-30}
  teardown; setup
  for p in 5201 5202 5203; do ns server $B/iperf3 -s -p $p -D; done
  sleep 1
  ns client $B/ping -n -c 10 -i 0.2 $S > /tmp/ping.$a.idle 2>&1
  sec $a.ping.idle; cat /tmp/ping.$a.idle; endsec $a.ping.idle
  echo "@@ $(now) $a start"
  ns client $B/iperf3 -c $S -p 5201 -P 8 -t $T --json > /tmp/$a.h2.json 2>&1 &
  ns client $B/iperf3 -c $S -p 5202 -P 1 -t $T --json > /tmp/$a.h1.json 2>&1 &
  if [ "$2" != 0 ]; then
    ns client $B/iperf3 -c $S -p 5203 -u -b $2 -l 972 -t $T --json > /tmp/$a.udp.json 2>&1 &
  fi
  ns client $B/ping -n -i 0.1 -c $((T * 10)) $S > /tmp/ping.$a 2>&1 &
  sec $a.samples; sampler $T; endsec $a.samples
  wait
  echo "@@ $(now) $a end"
  sec $a.h1; cat /tmp/$a.h1.json; endsec $a.h1
  sec $a.h2; cat /tmp/$a.h2.json; endsec $a.h2
  [ "$2" != 0 ] && { sec $a.udp; cat /tmp/$a.udp.json; endsec $a.udp; }
  sec $a.ping; cat /tmp/ping.$a; endsec $a.ping
  sec $a.tc; ns router $B/tc -s qdisc show dev rw; endsec $a.tc
}

echo "kernel $(uname -r) arms=$ARMS test=$TEST"
sec sysctl; for k in net.ipv4.tcp_congestion_control net.ipv4.tcp_ecn net.core.default_qdisc; do sysctl $k; done; endsec sysctl
for a in $(echo $ARMS | tr ',' ' '); do
  case $a in
    udp2) arm udp2 2M;;
    udp09) arm udp09 900K;;
    noudp) arm noudp 0;;
  esac
done
teardown
echo "ALL DONE"
