/* An LD_PRELOAD shim that makes the disk fail on purpose, for the fault-injection tests.
 *
 * While the file named by $ORYXMEM_FAULT_TRIGGER exists, the calls it names ("write",
 * "fsync", one word per line) fail with EIO for any file descriptor whose path ends in
 * "MEMORY.md", in ".tmp" (a MEMORY.md being rewritten) or in ".answered" (the journal of
 * its appends, on the same disk). Everything else passes through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int faulty(const char *call, int fd) {
    const char *trigger = getenv("ORYXMEM_FAULT_TRIGGER");
    if (trigger == NULL) return 0;
    FILE *f = fopen(trigger, "r");
    if (f == NULL) return 0;
    char words[256] = {0};
    size_t n = fread(words, 1, sizeof words - 1, f);
    fclose(f);
    words[n] = 0;
    if (strstr(words, call) == NULL) return 0;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len <= 0) return 0;
    target[len] = 0;
    size_t tl = strlen(target);
    const char *ends[] = {"MEMORY.md", ".tmp", ".answered"};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t el = strlen(ends[i]);
        if (tl >= el && strcmp(target + tl - el, ends[i]) == 0) return 1;
    }
    return 0;
}


static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

ssize_t write(int fd, const void *buf, size_t count) {
    if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
    if (faulty("write", fd)) { errno = EIO; return -1; }
    return real_write(fd, buf, count);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    if (!real_pwrite64) real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    if (faulty("write", fd)) { errno = EIO; return -1; }
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (!real_pwrite) real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    if (faulty("write", fd)) { errno = EIO; return -1; }
    return real_pwrite(fd, buf, count, offset);
}

int fsync(int fd) {
    if (!real_fsync) real_fsync = dlsym(RTLD_NEXT, "fsync");
    if (faulty("fsync", fd)) { errno = EIO; return -1; }
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (!real_fdatasync) real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    if (faulty("fsync", fd)) { errno = EIO; return -1; }
    return real_fdatasync(fd);
}
