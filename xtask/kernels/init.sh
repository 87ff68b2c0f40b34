#!/bin/busybox sh
# /init of `cargo xtask kernels`' initramfs: runs as PID 1 on whichever kernel booted it,
# runs probetop's scenario, prints what happened on the console and powers off.
# `cargo xtask kernels` (xtask/src/kernels.rs) reads the lines starting with "PT " and
# judges them; nothing is judged here.
#
# Knobs arrive from the kernel command line (the kernel hands unknown key=value
# parameters to init as environment variables):
#   pt_calls=N   calls of the workload fixture per probe run
#   pt_sema=N    calls of the probes fixture in the USDT run
#   pt_stop=S    probetop's --duration, a safety stop: runs end when the fixture exits
#   pt_churn=0   leave the fixture on whichever CPU the scheduler gives it (default: moved
#                between CPUs every 10 ms while it runs, as a server's threads move)
#   pt_smp=T     run the many-CPU scenario instead (booted with -smp 8): T threads of the
#                threads fixture, each calling work_unit pt_rate times a second for
#                pt_secs seconds (the fixture counts its calls), every thread moved round
#                all CPUs, in ring and in kernel mode
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin HOME=/root
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null

CALLS=${pt_calls:-20000}
SEMA=${pt_sema:-1000}
STOP=${pt_stop:-120}
CHURN=${pt_churn:-1}
P=/usr/bin/probetop
F=/fixtures
CHURN_FN=churn_cpus

say() { echo "PT $*"; }
# Every line of FILE as "PT <TAG> <STEP> | line".
relay() { [ -s "$1" ] && sed "s/^/PT $2 $3 | /" "$1"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# Starts a fixture and waits (10 s at most) for its "ready" line. Sets FX_PID.
start_fixture() {
	out=$1
	shift
	"$@" > "$out" 2>&1 &
	FX_PID=$!
	i=0
	while ! grep -q ready "$out" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}

# probe_run STEP FIXTURE_CMD PROBETOP_ARGS...: starts the fixture (it waits for SIGUSR1),
# attaches probetop, releases the fixture once probetop says it attached, and waits for
# both: the fixture makes its calls and exits, which ends probetop. A probetop that ends
# without attaching gets the fixture killed.
probe_run() {
	step=$1 fx=$2
	shift 2
	start_fixture /tmp/$step.fx $fx
	run_on_fixture $step "$@"
}

# Moves PID between the first two CPUs every 10 ms while it lives: a thread that moves
# inside the kernel's uprobe path, or between the halves of a single-stepped hit, must
# still be timed as one dispatch of its own probe. Sets CHURN_PID.
churn_cpus() {
	CHURN_PID=
	[ "$CHURN" = 1 ] && [ "$(nproc)" -ge 2 ] || return 0
	(while kill -0 $1 2>/dev/null; do
		taskset -p 1 $1 > /dev/null 2>&1; usleep 10000
		taskset -p 2 $1 > /dev/null 2>&1; usleep 10000
	done) &
	CHURN_PID=$!
}

# Moves every thread of PID round all CPUs while it lives: thread i to CPU (i + k) mod N
# on the k-th turn, so each CPU's staged batch, flush and counters see hits of many
# threads. Writes the CPU each thread last ran on (field 39 of its stat) to
# /tmp/$step.cpus, one a line, so that the judge sees every CPU was used. Sets
# CHURN_PID.
spread_cpus() {
	n=$(nproc)
	(k=0
	while kill -0 $1 2>/dev/null; do
		i=0
		for t in /proc/$1/task/*; do
			tid=${t##*/}
			taskset -p $(printf %x $((1 << ((i + k) % n)))) $tid > /dev/null 2>&1
			awk '{ print $39 }' $t/stat 2>/dev/null
			i=$((i + 1))
		done
		k=$((k + 1))
		usleep 10000
	done > /tmp/$step.cpus) &
	CHURN_PID=$!
}

# Waits (120 s at most) for "probetop: attached" in FILE while PID lives; 1 if it never came.
wait_attached() {
	i=0
	while [ $i -lt 1200 ]; do
		if grep -q "probetop: attached" "$1"; then return 0; fi
		kill -0 $2 2>/dev/null || return 1
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# run_on_fixture STEP PROBETOP_ARGS...: probe_run's part after the fixture started
# (FX_PID).
run_on_fixture() {
	step=$1
	shift
	[ -n "$BEFORE_RUN" ] && $BEFORE_RUN
	t0=$(uptime_s)
	$P --pid $FX_PID "$@" --no-tui --duration $STOP --export /tmp/$step.json \
		> /tmp/$step.out 2> /tmp/$step.err &
	pp=$!
	attached=0
	wait_attached /tmp/$step.err $pp && attached=1
	if [ $attached = 1 ]; then $CHURN_FN $FX_PID; kill -USR1 $FX_PID; else kill -TERM $FX_PID; fi
	wait $FX_PID
	fx_rc=$?
	[ -n "$CHURN_PID" ] && wait $CHURN_PID
	wait $pp
	rc=$?
	say "RC $step probetop=$rc attached=$attached fixture=$fx_rc secs=$(awk -v a=$t0 -v b=$(uptime_s) 'BEGIN { printf "%.1f", b - a }')"
	relay /tmp/$step.err ERR $step
	relay /tmp/$step.fx FX $step
	# The export on one line (JSON strings hold no raw newlines).
	[ -s /tmp/$step.json ] && echo "PT JSON $step $(tr -d '\n' < /tmp/$step.json)"
}

# The dist step's probetop is the static file of `cargo xtask dist`: it runs with no libc
# and no dynamic loader on the file system. Its fixture starts first (it needs them), then
# they are moved away, and the glibc probetop must fail to start, until restore_libc.
hide_libc() {
	mkdir -p /nolibc
	for d in /lib /lib64 /usr/lib; do
		[ -e $d ] && mv $d /nolibc/$(echo $d | tr / _)
	done
	/usr/bin/probetop --version > /dev/null 2>&1
	say "NOLIBC $step glibc_probetop_rc=$?"
}
restore_libc() {
	for moved in /nolibc/*; do
		[ -e "$moved" ] && mv "$moved" "$(basename "$moved" | tr _ /)"
	done
}

# A line of its own: the BIOS's last output has no newline.
echo
say "BEGIN kernel=$(uname -r) cpus=$(nproc) calls=$CALLS sema=$SEMA churn=$CHURN"
# What the kernel lets be traced of its uprobe path (docs/kernels.md quotes it).
grep -E "uprobe|uretprobe" /sys/kernel/tracing/available_filter_functions 2>/dev/null |
	sed "s/^/PT HOOKS | /"
if [ -n "$pt_smp" ]; then
	# Many CPUs: the threads fixture's work_unit from pt_smp threads spread over every
	# CPU; the ring (8 MiB) holds every record of the run, so none may be dropped.
	CHURN_FN=spread_cpus
	TH="$F/threads --threads $pt_smp --rate ${pt_rate:-1000} --seconds ${pt_secs:-5}"
	for mode in ring kernel; do
		probe_run smp-$mode "$TH" -e uprobe:work_unit --mode $mode
		say "CPUS smp-$mode seen=$(sort -un /tmp/smp-$mode.cpus | tr '\n' ' ')"
	done
	say "END uptime=$(uptime_s)"
	sync
	poweroff -f
fi
W="$F/workload --calls $CALLS --wait-signal"
PROBES="-e uprobe:work_unit -e uretprobe:leaf_ret -e usdt:workload:unit"
probe_run ring "$W" $PROBES
probe_run kernel "$W" $PROBES --mode kernel
# A second probetop on the same fixture, on a function the first does not probe: its
# hits are another tool's uprobes to the first, which must count every one of them as
# such, and none of its own.
start_fixture /tmp/foreign.fx $W
$P --pid $FX_PID -e uprobe:workload_xol --no-tui --duration $STOP --export /tmp/other.json \
	> /tmp/other.out 2> /tmp/other.err &
op=$!
wait_attached /tmp/other.err $op
run_on_fixture foreign $PROBES
wait $op
say "RC other probetop=$?"
relay /tmp/other.err ERR other
[ -s /tmp/other.json ] && echo "PT JSON other $(tr -d '\n' < /tmp/other.json)"
probe_run usdt "$F/probes --count $SEMA --wait-signal" -e usdt:fixture_sema:tick -e usdt:fixture:tick
# The red zone: values a leaf function keeps below %rsp across a probed `nop; nop5` USDT
# site and a probed nop5 entry must come back as stored (the fixture's done line counts).
RZ="-e usdt:redzone:site -e uprobe:redzone_entry"
probe_run redzone "$F/redzone --calls $CALLS" $RZ
probe_run redzone-kernel "$F/redzone --calls $CALLS" $RZ --mode kernel

start_fixture /tmp/list.fx $F/workload --calls 1 --wait-signal
$P list --pid $FX_PID > /tmp/list.out 2> /tmp/list.err
say "RC list probetop=$? lines=$(wc -l < /tmp/list.out)"
relay /tmp/list.err ERR list
# The points the scenario probes, as listed.
grep -E " (work_unit|leaf_ret|workload:unit)( |\$)" /tmp/list.out | sed 's/^/PT OUT list | /'
kill -TERM $FX_PID
wait $FX_PID

P=/dist/probetop BEFORE_RUN=hide_libc
probe_run dist "$W" $PROBES
restore_libc
P=/usr/bin/probetop BEFORE_RUN=

say "END uptime=$(uptime_s)"
sync
poweroff -f
