/* Sends from registered memory through libfabric's C API, in one process over udp://
 * (auto-shm off): fi_mr_reg a buffer, fi_tsend / fi_send / fi_tsendmsg with fi_mr_desc,
 * each completing with the data intact; a desc that is no live region of the domain, a
 * buffer outside the region, a short message and a closed region's stale desc are sent
 * by copying; closing a region with a send outstanding frees nothing the send reads.
 * Run with FI_MYRI_STATS=1: the sender's line on stderr counts the copy-free sends (the
 * Rust side checks it). Exits 0 when every check passes. */
#include "common.h"

static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;

static void open_ep(struct fi_info *info, struct ep *out) {
    char name[64];
    size_t len = sizeof name;
    OK(fi_endpoint(domain, info, &out->ep, NULL));
    OK(fi_ep_bind(out->ep, &av->fid, 0));
    OK(fi_ep_bind(out->ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(out->ep));
    OK(fi_getname(&out->ep->fid, name, &len));
    CHECK(fi_av_insert(av, name, 1, &out->addr, 0, NULL) == 1, "av insert");
}

/* Waits for the completions of contexts 1 (the receive) and 2 (the send), in any order,
 * and checks the receive got `len` bytes equal to `sent`. */
static void both_complete(const char *in, const char *sent, size_t len, const char *what) {
    int seen = 0;
    double until = now() + 30;
    while (seen != 3) {
        struct fi_cq_tagged_entry e;
        long r = fi_cq_read(cq, &e, 1);
        if (r == -FI_EAGAIN) {
            CHECK(now() < until, "%s: no completion in 30 s (seen %d)", what, seen);
            continue;
        }
        CHECK(r == 1, "%s: cq read %ld", what, r);
        long ctx = (long)e.op_context;
        CHECK(ctx == 1 || ctx == 2, "%s: context %ld", what, ctx);
        if (ctx == 1)
            CHECK(e.len == len && (e.flags & FI_RECV), "%s: recv len %zu", what, e.len);
        else
            CHECK(e.flags & FI_SEND, "%s: send flags", what);
        seen |= (int)ctx;
    }
    CHECK(memcmp(in, sent, len) == 0, "%s: data", what);
}

int main(void) {
    struct fi_info *hints = fi_allocinfo(), *info, *all;
    struct fid_fabric *fabric;
    struct ep a, b;
    hints->caps = FI_TAGGED | FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("myri");
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &all));
    for (info = all; info && strcmp(info->fabric_attr->prov_name, "myri"); info = info->next)
        ;
    CHECK(info != NULL, "no entry of provider myri");
    OK(fi_fabric(info->fabric_attr, &fabric, NULL));
    OK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    OK(fi_av_open(domain, &av_attr, &av, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    open_ep(info, &a);
    open_ep(info, &b);

    size_t len = 1 << 20, region = len + 4096;
    char *out = malloc(region), *other = malloc(len), *in = malloc(len);
    CHECK(out && other && in, "malloc");
    for (size_t i = 0; i < region; i++)
        out[i] = (char)(i * 7 + i / 251);
    memcpy(other, out + 3, len);
    struct fid_mr *mr;
    OK(fi_mr_reg(domain, out, region, FI_SEND, 0, 0, 0, &mr, NULL));
    void *desc = fi_mr_desc(mr);
    CHECK(desc != NULL, "fi_mr_desc");

    /* Copy-free: fi_tsend, fi_send, fi_tsendmsg from inside the region. */
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 7, 0, (void *)1));
    OK(fi_tsend(b.ep, out + 100, len, desc, a.addr, 7, (void *)2));
    both_complete(in, out + 100, len, "fi_tsend");
    memset(in, 0, len);
    OK(fi_recv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, (void *)1));
    OK(fi_send(b.ep, out + 4096, len, desc, a.addr, (void *)2));
    both_complete(in, out + 4096, len, "fi_send");
    memset(in, 0, len);
    struct iovec iov = {.iov_base = out + 1, .iov_len = len};
    struct fi_msg_tagged m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                              .addr = a.addr, .tag = 8, .context = (void *)2};
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 8, 0, (void *)1));
    OK(fi_tsendmsg(b.ep, &m, FI_COMPLETION));
    both_complete(in, out + 1, len, "fi_tsendmsg");

    /* Copied: a desc that is no region, a buffer outside the region, a short message. */
    char fake[64];
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 9, 0, (void *)1));
    OK(fi_tsend(b.ep, out, len, fake, a.addr, 9, (void *)2));
    both_complete(in, out, len, "a desc that is no region");
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 9, 0, (void *)1));
    OK(fi_tsend(b.ep, other, len, desc, a.addr, 9, (void *)2));
    both_complete(in, other, len, "a buffer outside the region");
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 9, 0, (void *)1));
    OK(fi_tsend(b.ep, out, 100, desc, a.addr, 9, (void *)2));
    both_complete(in, out, 100, "a short message");

    /* The region closed while a send from it is outstanding: the send still completes
     * with the data intact (the buffer itself stays the application's until then). */
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 10, 0, (void *)1));
    OK(fi_tsend(b.ep, out + 5, len, desc, a.addr, 10, (void *)2));
    OK(fi_close(&mr->fid));
    both_complete(in, out + 5, len, "closed region");
    CHECK(fi_close(&mr->fid) == -FI_EINVAL, "closing the region twice");
    /* Its stale desc is not believed: copied. */
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 11, 0, (void *)1));
    OK(fi_tsend(b.ep, out, len, desc, a.addr, 11, (void *)2));
    both_complete(in, out, len, "stale desc");

    OK(fi_close(&a.ep->fid));
    OK(fi_close(&b.ep->fid));
    OK(fi_close(&cq->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&domain->fid));
    OK(fi_close(&fabric->fid));
    fi_freeinfo(all);
    fi_freeinfo(hints);
    free(out);
    free(other);
    free(in);
    printf("mr: all checks passed\n");
    return 0;
}
