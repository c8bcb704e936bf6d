/* Automatic progress through libfabric's C API, in one process over udp:// (auto-shm
 * off): fi_getinfo with FI_PROGRESS_AUTO in the hints answers it; two RDM endpoints of
 * one such domain, each with its own completion queue; a 16 MiB message from b to a,
 * and only a's queue is read. With manual progress b would send its first window and
 * stop (nothing drives it: its queue is never read); the domain's progress thread sends
 * the rest, so a's receive completes with the data intact, and b's send completion is
 * waiting in b's queue afterwards. Then the same for a message b sends while neither
 * queue is read at all: both completions are there when the program looks. With
 * argument `manual` it checks the first half's premise instead: in a domain of manual
 * progress the message does not arrive while only a's queue is read (it exits 0 when
 * a's receive is still incomplete after a second). Exits 0 when every check passes. */
#include "common.h"
#include <unistd.h>

static struct fid_domain *domain;
static struct fid_av *av;

static void open_ep(struct fi_info *info, struct fid_cq *cq, struct ep *out) {
    char name[64];
    size_t len = sizeof name;
    OK(fi_endpoint(domain, info, &out->ep, NULL));
    OK(fi_ep_bind(out->ep, &av->fid, 0));
    OK(fi_ep_bind(out->ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    OK(fi_enable(out->ep));
    OK(fi_getname(&out->ep->fid, name, &len));
    CHECK(fi_av_insert(av, name, 1, &out->addr, 0, NULL) == 1, "av insert");
}

/* Reads `cq` until the completion of `ctx` comes, or `seconds` pass (returns 0 then). */
static int wait_for(struct fid_cq *cq, long ctx, size_t len, double seconds) {
    double until = now() + seconds;
    for (;;) {
        struct fi_cq_tagged_entry e;
        long r = fi_cq_read(cq, &e, 1);
        if (r == -FI_EAGAIN) {
            if (now() > until)
                return 0;
            continue;
        }
        CHECK(r == 1, "cq read %ld", r);
        CHECK((long)e.op_context == ctx, "context %ld, waiting for %ld", (long)e.op_context, ctx);
        if (e.flags & FI_RECV)
            CHECK(e.len == len, "received %zu of %zu bytes", e.len, len);
        return 1;
    }
}

int main(int argc, char **argv) {
    int manual = argc > 1 && strcmp(argv[1], "manual") == 0;
    struct fi_info *hints = fi_allocinfo(), *info, *all;
    struct fid_fabric *fabric;
    struct fid_cq *cq_a, *cq_b;
    struct ep a, b;
    hints->caps = FI_TAGGED | FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("myri");
    hints->domain_attr->data_progress = manual ? FI_PROGRESS_MANUAL : FI_PROGRESS_AUTO;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &all));
    for (info = all; info && strcmp(info->fabric_attr->prov_name, "myri"); info = info->next)
        ;
    CHECK(info != NULL, "no entry of provider myri");
    int want = manual ? FI_PROGRESS_MANUAL : FI_PROGRESS_AUTO;
    CHECK(info->domain_attr->data_progress == want, "data progress %d",
          info->domain_attr->data_progress);
    CHECK(info->domain_attr->control_progress == want, "control progress %d",
          info->domain_attr->control_progress);
    OK(fi_fabric(info->fabric_attr, &fabric, NULL));
    OK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    OK(fi_av_open(domain, &av_attr, &av, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    OK(fi_cq_open(domain, &cq_attr, &cq_a, NULL));
    OK(fi_cq_open(domain, &cq_attr, &cq_b, NULL));
    open_ep(info, cq_a, &a);
    open_ep(info, cq_b, &b);

    size_t len = 16 << 20;
    char *out = malloc(len), *in = malloc(len);
    CHECK(out && in, "malloc");
    for (size_t i = 0; i < len; i++)
        out[i] = (char)(i * 7 + i / 251);

    /* b's queue is never read while a waits. */
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 7, 0, (void *)1));
    OK(fi_tsend(b.ep, out, len, NULL, a.addr, 7, (void *)2));
    if (manual) {
        CHECK(!wait_for(cq_a, 1, len, 1.0), "manual progress: arrived without b driven");
        printf("manual: not arrived while b was not driven, as expected\n");
        return 0;
    }
    CHECK(wait_for(cq_a, 1, len, 30), "the receive did not complete in 30 s");
    CHECK(memcmp(in, out, len) == 0, "data");
    CHECK(wait_for(cq_b, 2, len, 30), "the send did not complete");

    /* Neither queue read: the thread delivers and completes both. */
    memset(in, 0, len);
    OK(fi_trecv(a.ep, in, len, NULL, FI_ADDR_UNSPEC, 8, 0, (void *)3));
    OK(fi_tsend(b.ep, out, len, NULL, a.addr, 8, (void *)4));
    /* The last byte lands last (the message is copied into the buffer in order). */
    CHECK(out[len - 1] != 0, "the pattern's last byte is 0");
    double until = now() + 30;
    while (__atomic_load_n(&in[len - 1], __ATOMIC_ACQUIRE) != out[len - 1]) {
        CHECK(now() < until, "the data did not land in 30 s without a queue read");
        usleep(1000);
    }
    CHECK(wait_for(cq_a, 3, len, 30), "the receive's completion");
    CHECK(memcmp(in, out, len) == 0, "data");
    CHECK(wait_for(cq_b, 4, len, 30), "the send's completion");

    OK(fi_close(&a.ep->fid));
    OK(fi_close(&b.ep->fid));
    OK(fi_close(&cq_a->fid));
    OK(fi_close(&cq_b->fid));
    OK(fi_close(&av->fid));
    OK(fi_close(&domain->fid));
    OK(fi_close(&fabric->fid));
    fi_freeinfo(all);
    fi_freeinfo(hints);
    free(out);
    free(in);
    printf("auto progress: ok\n");
    return 0;
}
