/* What the C tests share: libfabric's headers, CHECK and OK (the first failure printed
 * with its line, then exit 1), an endpoint with its address-vector entry, and a
 * monotonic clock in seconds for their time limits. */
#ifndef MYRI_TEST_COMMON_H
#define MYRI_TEST_COMMON_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "line %d: %s: ", __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define OK(call)                                                               \
    do {                                                                       \
        long r_ = (long)(call);                                                \
        CHECK(r_ >= 0, "%s = %ld (%s)", #call, r_, fi_strerror((int)-r_));     \
    } while (0)

struct ep {
    struct fid_ep *ep;
    fi_addr_t addr;
};

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#endif
