/* The floor of `roundtrip agent --probe tcp` on this machine: the least a prober can do per TCP ping.
 * Holds one TCP connection per target of PEERS (lines HOST:PORT), sends each a 64-byte sockperf ping-pong
 * message (u64 seq, u16 flags = CLIENT|PONG_REQUEST, u32 length, big-endian, then padding) once a second,
 * the targets' phases spread evenly over the second, and reads the echoes. It wakes as the agent does: on
 * a grid of 2^21 ns (the agent's SLACK), with a kernel timer slack of 500 us, sending every ping due by the
 * wake-up (plus 1 ms, the agent's BATCH); replies wake it through level-triggered epoll. Per reply it keeps
 * the RTT (CLOCK_MONOTONIC) in a log2 histogram and counts it; nothing else: no metrics, no labels, no
 * allocation. The count is written into COUNT_FILE (a shared mapping: no system call) for the benchmark to
 * read. Build: cc -O2 -o ref_agent ref_agent.c   Usage: ref_agent PEERS COUNT_FILE */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SIZE 64
#define GRID (1ull << 21)
#define BATCH 1000000ull
#define SEC 1000000000ull

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * SEC + (uint64_t)t.tv_nsec;
}

struct conn {
    int fd;
    uint64_t due, sent_at, seq;
    unsigned got;
};

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s PEERS COUNT_FILE\n", argv[0]); return 2; }
    FILE *pf = fopen(argv[1], "r");
    if (!pf) { perror(argv[1]); return 1; }
    int cf = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (cf < 0 || ftruncate(cf, 32) != 0) { perror(argv[2]); return 1; }
    char *count_out = mmap(NULL, 32, PROT_READ | PROT_WRITE, MAP_SHARED, cf, 0);
    if (count_out == MAP_FAILED) { perror("mmap"); return 1; }
    size_t n = 0, cap = 1024;
    struct conn *c = calloc(cap, sizeof *c);
    int ep = epoll_create1(0);
    char line[256];
    while (fgets(line, sizeof line, pf)) {
        char *colon = strrchr(line, ':');
        if (!colon) continue;
        *colon = 0;
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)atoi(colon + 1));
        if (inet_pton(AF_INET, line, &a.sin_addr) != 1) { fprintf(stderr, "bad address %s\n", line); return 1; }
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 1; }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        if (n == cap) c = realloc(c, (cap *= 2) * sizeof *c);
        c[n].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = n};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        n++;
    }
    if (n == 0) { fprintf(stderr, "no targets\n"); return 1; }
    prctl(PR_SET_TIMERSLACK, 500000ul, 0, 0, 0);
    uint64_t origin = now_ns();
    for (size_t i = 0; i < n; i++) c[i].due = origin + SEC * i / n;
    uint64_t hist[64] = {0}, count = 0;
    size_t next = 0; /* the phases are even and the interval common: due times come round in index order */
    unsigned char out[SIZE] = {0}, in[4096];
    out[9] = 3;
    out[12] = SIZE >> 8; out[13] = SIZE & 0xff;
    struct epoll_event evs[1024];
    for (;;) {
        uint64_t at = c[next].due, wake = origin + (at - origin + GRID - 1) / GRID * GRID, t = now_ns();
        int timeout = wake > t ? (int)((wake - t + 999999) / 1000000) : 0;
        int k = epoll_wait(ep, evs, 1024, timeout);
        if (k < 0 && errno != EINTR) { perror("epoll_wait"); return 1; }
        for (int e = 0; e < k; e++) {
            struct conn *x = &c[evs[e].data.u64];
            ssize_t r = recv(x->fd, in, sizeof in, 0);
            if (r <= 0) { fprintf(stderr, "connection closed\n"); return 1; }
            x->got += (unsigned)r;
            while (x->got >= SIZE) {
                x->got -= SIZE;
                uint64_t rtt = now_ns() - x->sent_at;
                hist[63 - __builtin_clzll(rtt | 1)]++;
                count++;
            }
        }
        t = now_ns();
        if (t < wake) continue;
        while (c[next].due <= t + BATCH) {
            struct conn *x = &c[next];
            uint64_t s = ++x->seq;
            for (int i = 0; i < 8; i++) out[i] = (unsigned char)(s >> (56 - 8 * i));
            x->sent_at = now_ns();
            if (send(x->fd, out, SIZE, MSG_NOSIGNAL) != SIZE) { perror("send"); return 1; }
            x->due += SEC;
            next = (next + 1) % n;
        }
        snprintf(count_out, 32, "%llu\n", (unsigned long long)count);
    }
}
