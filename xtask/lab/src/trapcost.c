/* What one probe hit costs the probed thread on this machine, outside mariadbd:
 * `cargo xtask mysql-report` compiles this, attaches probetop to one of the functions
 * below and reads the CPU time per call the program reports.
 *
 *   trapcost CALLS FUNCTION   (FUNCTION: f_push or f_cmp)
 *
 * Prints "ready pid=N", waits for a line on stdin (probes attached), calls FUNCTION
 * CALLS times, prints "calls=N user_ns=U sys_ns=S wall_ns=W" per call, and exits.
 *
 * f_push starts with `push %rbp`, which x86-64 uprobes emulate; f_cmp starts with
 * `cmp $8,%edi`, which they must single-step out of line, as mariadbd's
 * mysqld_stmt_execute does. Written in assembly so no compiler changes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

__asm__(".text\n"
        ".globl f_push\n.type f_push,@function\n"
        "f_push:\n push %rbp\n mov %rsp,%rbp\n pop %rbp\n ret\n"
        ".size f_push, .-f_push\n"
        ".globl f_cmp\n.type f_cmp,@function\n"
        "f_cmp:\n cmp $8,%edi\n jbe 1f\n1: ret\n"
        ".size f_cmp, .-f_cmp\n");
int f_push(int);
int f_cmp(int);

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double seconds(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: trapcost CALLS f_push|f_cmp\n");
        return 2;
    }
    long calls = atol(argv[1]);
    int (*f)(int) = strcmp(argv[2], "f_cmp") == 0 ? f_cmp : f_push;
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double w0 = wall();
    volatile int sink = 0;
    for (long i = 0; i < calls; i++)
        sink += f((int)i);
    double w1 = wall();
    getrusage(RUSAGE_SELF, &r1);
    printf("calls=%ld user_ns=%.1f sys_ns=%.1f wall_ns=%.1f\n", calls,
           (seconds(r1.ru_utime) - seconds(r0.ru_utime)) * 1e9 / calls,
           (seconds(r1.ru_stime) - seconds(r0.ru_stime)) * 1e9 / calls,
           (w1 - w0) * 1e9 / calls);
    return 0;
}
