/* Minimal blocking ping-pong client: the benchmark's reference for `roundtrip ping`.
 * Speaks the sockperf 3.x header (u64 seq, u16 flags = CLIENT|PONG_REQUEST, u32 length, big-endian), sends one
 * message, blocks until its echo is read, records the RTT with CLOCK_MONOTONIC, repeats for SECONDS.
 * Prints "p50_ns p99_ns count mean_ns". Build: cc -O2 -o ref_pingpong ref_pingpong.c
 * Usage: ref_pingpong tcp|udp HOST PORT SIZE SECONDS WARMUP_SECONDS [COUNT]
 * With COUNT it stops after COUNT measured round trips (SECONDS is then only a cap). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static void header(unsigned char *m, uint64_t seq, uint32_t len) {
    for (int i = 0; i < 8; i++) m[i] = (unsigned char)(seq >> (56 - 8 * i));
    m[8] = 0; m[9] = 3;
    m[10] = len >> 24; m[11] = len >> 16; m[12] = len >> 8; m[13] = len;
}
static int read_full(int fd, unsigned char *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) { fprintf(stderr, "usage: %s tcp|udp HOST PORT SIZE SECONDS WARMUP [COUNT]\n", argv[0]); return 2; }
    size_t count = argc == 8 ? (size_t)atol(argv[7]) : 0;
    int tcp = strcmp(argv[1], "tcp") == 0;
    size_t size = (size_t)atoi(argv[4]);
    double secs = atof(argv[5]), warm = atof(argv[6]);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 1; }
    if (tcp) { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
    unsigned char *out = calloc(1, size), *in = calloc(1, size + 1);
    size_t cap = 1 << 24, n = 0;
    uint64_t *rtt = malloc(cap * sizeof *rtt), seq = 0;
    uint64_t warm_end = now_ns() + (uint64_t)(warm * 1e9);
    while (now_ns() < warm_end) {
        header(out, ++seq, (uint32_t)size);
        if (write(fd, out, size) != (ssize_t)size) return 1;
        if (tcp ? read_full(fd, in, size) : (recv(fd, in, size + 1, 0) < 0)) return 1;
    }
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
    for (;;) {
        header(out, ++seq, (uint32_t)size);
        uint64_t t0 = now_ns();
        if (write(fd, out, size) != (ssize_t)size) return 1;
        if (tcp ? read_full(fd, in, size) : (recv(fd, in, size + 1, 0) < 0)) return 1;
        uint64_t t1 = now_ns();
        if (n < cap) rtt[n++] = t1 - t0;
        if (t1 >= end || (count && n >= count)) break;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)rtt[i];
    qsort(rtt, n, sizeof *rtt, cmp);
    printf("%llu %llu %zu %.0f\n", (unsigned long long)rtt[(n - 1) / 2], (unsigned long long)rtt[(size_t)(n * 0.99)], n,
           sum / (double)n);
    return 0;
}
