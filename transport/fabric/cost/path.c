/* path N: N one-way steps of an 8 B tagged ping-pong between two RDM endpoints of one
 * process (udp://, one peer each), each step of the path in a function of its own so that
 * callgrind can count it alone (transport/fabric/cost.sh): send_msg (fi_tinjectdata, the
 * sender's part of the path), busy_read (the fi_cq_read that finds the message: the
 * receiver's part), after_read (the reads after it, where deferred work runs: off the
 * path), post_recv (fi_trecv, posted before the message comes: off the path).
 * Loopback hands a datagram over within the sending call, so the first read finds it. */
#include "../tests/c/common.h"
static struct fid_domain *domain; static struct fid_av *av;
static void open_ep(struct fi_info *info, struct fid_cq *cq, struct ep *out) {
    char name[64]; size_t len = sizeof name;
    OK(fi_endpoint(domain, info, &out->ep, NULL)); OK(fi_ep_bind(out->ep, &av->fid, 0));
    OK(fi_ep_bind(out->ep, &cq->fid, FI_TRANSMIT | FI_RECV)); OK(fi_enable(out->ep));
    OK(fi_getname(&out->ep->fid, name, &len)); CHECK(fi_av_insert(av, name, 1, &out->addr, 0, NULL) == 1, "av");
}
static char sbuf[8], rbuf[8];
__attribute__((noinline)) void post_recv(struct fid_ep *ep) { OK(fi_trecv(ep, rbuf, 8, NULL, FI_ADDR_UNSPEC, 7, 0, rbuf)); }
__attribute__((noinline)) void send_msg(struct fid_ep *ep, fi_addr_t to) { OK(fi_tinjectdata(ep, sbuf, 8, 42, to, 7)); }
__attribute__((noinline)) long busy_read(struct fid_cq *cq, struct fi_cq_tagged_entry *e) { return fi_cq_read(cq, e, 1); }
__attribute__((noinline)) long idle_read(struct fid_cq *cq, struct fi_cq_tagged_entry *e) { return fi_cq_read(cq, e, 1); }
__attribute__((noinline)) long after_read(struct fid_cq *cq, struct fi_cq_tagged_entry *e) { return fi_cq_read(cq, e, 1); }
int main(int argc, char **argv) {
    if (argc != 2 || atol(argv[1]) < 1) {
        fprintf(stderr, "usage: path N (one-way steps, at least 1)\n");
        return 2;
    }
    long n = atol(argv[1]);
    struct fi_info *hints = fi_allocinfo(), *info; struct fid_fabric *fabric; struct fid_cq *cq[2]; struct ep ep[2];
    hints->caps = FI_TAGGED | FI_MSG; hints->ep_attr->type = FI_EP_RDM; hints->fabric_attr->prov_name = strdup("myri");
    hints->domain_attr->cq_data_size = 4;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    OK(fi_fabric(info->fabric_attr, &fabric, NULL)); OK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE}; OK(fi_av_open(domain, &av_attr, &av, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
    for (int i = 0; i < 2; i++) OK(fi_cq_open(domain, &cq_attr, &cq[i], NULL));
    for (int i = 0; i < 2; i++) open_ep(info, cq[i], &ep[i]);
    struct fi_cq_tagged_entry e;
    long idle = 0;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int s = i & 1, r = s ^ 1;
        post_recv(ep[r].ep);
        send_msg(ep[s].ep, ep[r].addr);
        long got;
        while ((got = busy_read(cq[r], &e)) != 1) {
            CHECK(got == -FI_EAGAIN, "read %ld", got);
            idle++;
            idle_read(cq[s], &e); /* the sender's progress (the first exchanges: its introduction) */
        }
        CHECK(e.data == 42 && e.len == 8, "entry");
        after_read(cq[r], &e);
        after_read(cq[s], &e);
    }
    double t = now() - t0;
    printf("%ld exchanges, %.1f ns each, %ld busy_read calls that found nothing\n", n, t / n * 1e9, idle);
    return 0;
}
