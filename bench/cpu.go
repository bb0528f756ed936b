package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system: the
// simulator shares the machine with Redis, and a reader must be able to
// tell when the replicas, not Redis, took the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is Linux's RUSAGE_THREAD, which package syscall does not
// name.
const rusageThread = 1

// threadCPU is the CPU time the calling OS thread has used, user and
// system, or 0 where the kernel does not tell: what a call costs its own
// core, whatever else the machine runs meanwhile. The caller locks its
// goroutine to the thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of /proc/stat (USER_HZ), 100 on every Linux that Go
// supports.
const userHZ = 100

// machineCPU is the CPU time every process of the machine has used (the
// busy fields of /proc/stat's cpu line), or 0 where there is no
// /proc/stat: what else ran during a measurement is the rest.
func machineCPU() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0
	}
	// user nice system idle iowait irq softirq steal: all but idle and
	// iowait are busy.
	var ticks int64
	for i, v := range fields[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
}
