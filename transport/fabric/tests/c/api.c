/* The provider through libfabric's C API, in one process: tag matching, unexpected
 * messages, truncation, cancel, peek/claim, CQ data, counters, vectored sends, a 64 MiB
 * message between two endpoints, and bad input answered by error codes. Exits 0 when
 * every check passes; prints the first failure otherwise. */
#include "common.h"

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_cntr *cntr;

/* Reads one completion (or error: returns -FI_EAVAIL) within 30 s. */
static long read_one(struct fi_cq_tagged_entry *e, fi_addr_t *src) {
    double until = now() + 30;
    for (;;) {
        long r = fi_cq_readfrom(cq, e, 1, src);
        if (r != -FI_EAGAIN)
            return r;
        CHECK(now() < until, "no completion in 30 s");
    }
}

static struct fi_cq_err_entry read_err(void) {
    struct fi_cq_err_entry err;
    memset(&err, 0, sizeof err);
    OK(fi_cq_readerr(cq, &err, 0));
    return err;
}

static void open_ep(struct fi_info *info, struct ep *out) {
    char name[64];
    size_t len = sizeof name;
    OK(fi_endpoint(domain, info, &out->ep, NULL));
    OK(fi_ep_bind(out->ep, &av->fid, 0));
    OK(fi_ep_bind(out->ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_ep_bind(out->ep, &cntr->fid, FI_SEND | FI_RECV));
    OK(fi_enable(out->ep));
    OK(fi_getname(&out->ep->fid, name, &len));
    CHECK(len == sizeof(struct sockaddr_in), "address length %zu", len);
    CHECK(fi_av_insert(av, name, 1, &out->addr, 0, NULL) == 1, "av insert");
}

int main(void) {
    struct fi_info *hints = fi_allocinfo(), *info;
    struct fi_cq_tagged_entry e;
    fi_addr_t src;
    struct ep a, b;
    char buf[256];
    hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("myri");
    struct fi_info *all;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &all));
    /* libfabric layers its ofi_rxd over our DGRAM too ("myri;ofi_rxd"): take ours. */
    for (info = all; info && strcmp(info->fabric_attr->prov_name, "myri"); info = info->next)
        ;
    CHECK(info != NULL, "no entry of provider myri");
    OK(fi_fabric(info->fabric_attr, &fabric, NULL));
    OK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    OK(fi_av_open(domain, &av_attr, &av, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP};
    OK(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));
    open_ep(info, &a);
    open_ep(info, &b);

    /* Unexpected messages to self, matched by tag, then in arrival order. */
    for (int t = 1; t <= 3; t++) {
        snprintf(buf, sizeof buf, "message %d", t);
        OK(fi_tsend(a.ep, buf, strlen(buf) + 1, NULL, a.addr, 100 + t, (void *)(long)t));
        CHECK(read_one(&e, &src) == 1, "send completion");
        CHECK(e.op_context == (void *)(long)t && (e.flags & FI_SEND), "send entry");
    }
    char got[64];
    OK(fi_trecv(a.ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, 103, 0, (void *)7));
    CHECK(read_one(&e, &src) == 1, "recv");
    CHECK(strcmp(got, "message 3") == 0 && e.tag == 103 && e.len == 10, "got %s", got);
    CHECK(src == a.addr, "source %lu", (unsigned long)src);
    OK(fi_trecv(a.ep, got, sizeof got, NULL, a.addr, 0, ~0ULL, (void *)8));
    CHECK(read_one(&e, &src) == 1 && strcmp(got, "message 1") == 0, "arrival order: %s", got);
    OK(fi_trecv(a.ep, got, sizeof got, NULL, b.addr, 0, ~0ULL, (void *)9));
    CHECK(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "a directed receive from b took a's message");
    OK(fi_cancel(&a.ep->fid, (void *)9));
    CHECK(read_one(&e, &src) == -FI_EAVAIL, "cancel entry");
    struct fi_cq_err_entry err = read_err();
    CHECK(err.err == FI_ECANCELED && err.op_context == (void *)9, "cancel err %d", err.err);
    CHECK(fi_cancel(&a.ep->fid, (void *)9) == -FI_ENOENT, "cancel twice");
    OK(fi_trecv(a.ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, (void *)10));
    CHECK(read_one(&e, &src) == 1 && strcmp(got, "message 2") == 0, "last: %s", got);

    /* Truncation: nothing written past the buffer. */
    memset(buf, 'x', 100);
    OK(fi_tsend(a.ep, buf, 100, NULL, a.addr, 5, NULL));
    CHECK(read_one(&e, &src) == 1, "send");
    memset(got, 0, sizeof got);
    OK(fi_trecv(a.ep, got, 10, NULL, FI_ADDR_UNSPEC, 5, 0, (void *)11));
    CHECK(read_one(&e, &src) == -FI_EAVAIL, "truncation is an error");
    err = read_err();
    CHECK(err.err == FI_ETRUNC && err.olen == 90 && err.len == 10, "trunc %d %zu", err.err, err.olen);
    CHECK(got[9] == 'x' && got[10] == 0, "wrote past the buffer");

    /* Peek, claim, remote CQ data, from b to a. */
    strcpy(buf, "claimed");
    OK(fi_tsenddata(b.ep, buf, 8, NULL, 0xabc, a.addr, 77, NULL));
    CHECK(read_one(&e, &src) == 1, "senddata");
    struct iovec iov = {got, sizeof got};
    struct fi_context ctx;
    struct fi_msg_tagged msg = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                                .tag = 78, .ignore = 0, .context = &ctx};
    double until = now() + 30;
    for (;;) { /* b's message reaches a through the network: peek until it is there */
        OK(fi_trecvmsg(a.ep, &msg, FI_PEEK));
        if (read_one(&e, &src) == 1)
            CHECK(0, "peek of tag 78 matched");
        err = read_err();
        CHECK(err.err == FI_ENOMSG, "peek error %d", err.err);
        msg.tag = 77;
        OK(fi_trecvmsg(a.ep, &msg, FI_PEEK | FI_CLAIM));
        if (read_one(&e, &src) == 1)
            break;
        read_err();
        msg.tag = 78;
        CHECK(now() < until, "peek never found the message");
    }
    CHECK(e.len == 8 && e.data == 0xabc && (e.flags & FI_REMOTE_CQ_DATA) && src == b.addr,
          "peek entry len %zu data %lx", e.len, (unsigned long)e.data);
    OK(fi_trecvmsg(a.ep, &msg, FI_CLAIM));
    CHECK(read_one(&e, &src) == 1 && strcmp(got, "claimed") == 0, "claim: %s", got);
    CHECK(fi_trecvmsg(a.ep, &msg, FI_PEEK | FI_CLAIM | FI_DISCARD) == -FI_EBADFLAGS, "flags");

    /* Vectored untagged send, one receive. */
    struct iovec parts[3] = {{"ab", 2}, {"cd", 2}, {"ef", 3}};
    OK(fi_sendv(b.ep, parts, NULL, 3, a.addr, NULL));
    CHECK(read_one(&e, &src) == 1, "sendv");
    OK(fi_recv(a.ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, NULL));
    CHECK(read_one(&e, &src) == 1 && strcmp(got, "abcdef") == 0 && (e.flags & FI_MSG), "recv");
    CHECK(fi_cntr_read(cntr) > 0, "counter");

    /* 64 MiB from b to a, checked. */
    size_t big = 64 << 20;
    unsigned char *out = malloc(big), *in = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        out[i] = (unsigned char)(i * 7 + 3);
    in[big] = 0x5a;
    OK(fi_trecv(a.ep, in, big, NULL, b.addr, 64, 0, NULL));
    for (;;) {
        long r = fi_tsend(b.ep, out, big, NULL, a.addr, 64, NULL);
        if (r == 0)
            break;
        CHECK(r == -FI_EAGAIN, "64 MiB send: %ld", r);
        fi_cq_read(cq, &e, 0 + 1);
    }
    int done = 0;
    while (done < 2) {
        CHECK(read_one(&e, &src) == 1, "64 MiB completion");
        done++;
    }
    CHECK(memcmp(in, out, big) == 0 && in[big] == 0x5a, "64 MiB data");
    CHECK(fi_tsend(b.ep, out, big + 1, NULL, a.addr, 64, NULL) == -FI_EMSGSIZE, "too large");
    CHECK(fi_tinject(b.ep, out, 1 << 20, a.addr, 1) == -FI_EMSGSIZE, "inject too large");

    /* The read right after one that returned an entry takes what the queue holds and
     * drives nothing (an application reading until the queue is empty pays no progress
     * pass between a message and its answer); the read after it drives again. */
    char first[8], second[8];
    OK(fi_trecv(b.ep, first, sizeof first, NULL, FI_ADDR_UNSPEC, 77, 0, (void *)20));
    OK(fi_trecv(b.ep, second, sizeof second, NULL, FI_ADDR_UNSPEC, 78, 0, (void *)21));
    OK(fi_tinject(a.ep, "first", 6, b.addr, 77));
    CHECK(read_one(&e, &src) == 1 && e.op_context == (void *)20, "first");
    OK(fi_tinject(a.ep, "second", 7, b.addr, 78)); /* in b's socket when the call returns */
    CHECK(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "the read after an entry drove the endpoints");
    CHECK(read_one(&e, &src) == 1 && e.op_context == (void *)21, "the next read drives");
    CHECK(strcmp(first, "first") == 0 && strcmp(second, "second") == 0, "%s %s", first, second);

    /* Bad input: errors, not crashes. */
    struct fid_ep fake = *a.ep;
    CHECK(fi_tsend(&fake, buf, 1, NULL, a.addr, 1, NULL) == -FI_EINVAL, "unknown fid");
    CHECK(fi_tsend(a.ep, NULL, 5, NULL, a.addr, 1, NULL) == -FI_EINVAL, "null buffer");
    CHECK(fi_av_insert(av, NULL, 1, NULL, 0, NULL) == -FI_EINVAL, "null address");
    CHECK(fi_av_insert(av, buf, 1, NULL, 1, NULL) == -FI_EBADFLAGS, "bad flags");
    CHECK(fi_cq_read(cq, NULL, 1) == -FI_EINVAL, "null cq buffer");
    CHECK(fi_tsend(a.ep, buf, 1, NULL, 12345, 1, NULL) == -FI_EINVAL, "unknown address");
    hints->caps |= FI_RMA;
    struct fi_info *none = NULL;
    long r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &none);
    for (struct fi_info *i = none; i; i = i->next)
        CHECK(strcmp(i->fabric_attr->prov_name, "myri") != 0, "FI_RMA answered by myri");
    (void)r;
    fi_freeinfo(none);

    OK(fi_close(&a.ep->fid));
    OK(fi_close(&b.ep->fid));
    CHECK(fi_close(&fake.fid) == -FI_EINVAL, "closing an unknown fid");
    OK(fi_close(&cq->fid));
    OK(fi_close(&cntr->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&domain->fid));
    OK(fi_close(&fabric->fid));
    fi_freeinfo(all);
    fi_freeinfo(hints);
    free(out);
    free(in);
    printf("all checks passed\n");
    return 0;
}
