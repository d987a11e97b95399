package exec

import "syscall"

// osYield gives this thread's CPU to another runnable thread of the
// machine, if any (sched_yield): a watching worker must not hold a core
// that another process's thread (or this process's caller) needs.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
