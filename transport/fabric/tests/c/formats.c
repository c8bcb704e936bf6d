/* The provider's other surfaces through libfabric's C API: every CQ format, fi_cq_sread
 * on a queue with a wait object, counters and fi_cntr_wait, FI_AV_MAP, FI_ADDR_STR
 * addresses, inject/injectdata, untagged recvmsg with CQ data, FI_GETOPSFLAG and
 * FI_SETOPSFLAG, FI_SELECTIVE_COMPLETION, fi_setname, and an event queue. Exits 0 when
 * every check passes. */
#include "common.h"

static struct fi_info *find(struct fi_info *hints) {
    struct fi_info *all, *i;
    OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &all));
    for (i = all; i && strcmp(i->fabric_attr->prov_name, "myri"); i = i->next)
        ;
    CHECK(i != NULL, "no entry of provider myri");
    return fi_dupinfo(i);
}

int main(void) {
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("myri");
    struct fi_info *info = find(hints);
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_eq *eq;
    OK(fi_fabric(info->fabric_attr, &fabric, NULL));
    OK(fi_domain(fabric, info, &domain, NULL));
    struct fi_eq_attr eq_attr = {.size = 8, .wait_obj = FI_WAIT_NONE};
    OK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
    uint32_t event;
    char eqbuf[64];
    CHECK(fi_eq_read(eq, &event, eqbuf, sizeof eqbuf, 0) == -FI_EAGAIN, "empty eq");

    /* One CQ per format; each endpoint sends to itself through a map AV. */
    int formats[] = {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA,
                     FI_CQ_FORMAT_TAGGED};
    for (int f = 0; f < 4; f++) {
        struct fid_av *av;
        struct fid_cq *cq;
        struct fid_ep *ep;
        struct fid_cntr *cntr;
        struct fi_av_attr av_attr = {.type = FI_AV_MAP};
        struct fi_cq_attr cq_attr = {.format = formats[f], .wait_obj = FI_WAIT_UNSPEC};
        struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP};
        OK(fi_av_open(domain, &av_attr, &av, NULL));
        OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
        OK(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));
        OK(fi_endpoint(domain, info, &ep, NULL));
        OK(fi_ep_bind(ep, &av->fid, 0));
        OK(fi_ep_bind(ep, &eq->fid, 0));
        OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
        OK(fi_ep_bind(ep, &cntr->fid, FI_RECV));
        CHECK(fi_send(ep, "x", 1, NULL, 0, NULL) == -FI_EOPBADSTATE, "send before enable");
        OK(fi_enable(ep));
        char name[64];
        size_t len = sizeof name;
        OK(fi_getname(&ep->fid, name, &len));
        fi_addr_t self;
        CHECK(fi_av_insert(av, name, 1, &self, 0, NULL) == 1, "insert");
        char back[64];
        size_t blen = sizeof back;
        OK(fi_av_lookup(av, self, back, &blen));
        CHECK(blen == len && memcmp(back, name, len) == 0, "lookup");

        char got[32] = {0};
        OK(fi_recv(ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, (void *)1));
        OK(fi_injectdata(ep, "hello", 6, 0x77, self));
        union {
            struct fi_cq_entry c;
            struct fi_cq_msg_entry m;
            struct fi_cq_data_entry d;
            struct fi_cq_tagged_entry t;
            char bytes[64];
        } e;
        memset(&e, 0xee, sizeof e);
        fi_addr_t src = 0;
        CHECK(fi_cq_sreadfrom(cq, &e, 1, &src, NULL, 10000) == 1, "sread format %d", formats[f]);
        CHECK(e.c.op_context == (void *)1 && strcmp(got, "hello") == 0 && src == self, "entry");
        if (formats[f] >= FI_CQ_FORMAT_MSG)
            CHECK(e.m.len == 6 && (e.m.flags & FI_RECV) && (e.m.flags & FI_REMOTE_CQ_DATA), "msg");
        if (formats[f] >= FI_CQ_FORMAT_DATA)
            CHECK(e.d.data == 0x77 && e.d.buf == got, "data");
        if (formats[f] == FI_CQ_FORMAT_CONTEXT)
            CHECK((unsigned char)e.bytes[sizeof(struct fi_cq_entry)] == 0xee, "wrote past entry");
        CHECK(fi_cntr_read(cntr) == 1, "counter %lu", (unsigned long)fi_cntr_read(cntr));
        OK(fi_cntr_wait(cntr, 1, 1000));
        CHECK(fi_cntr_wait(cntr, 2, 10) == -FI_ETIMEDOUT, "cntr wait timeout");
        CHECK(fi_cq_sread(cq, &e, 1, NULL, 10) == -FI_EAGAIN, "sread timeout");
        OK(fi_close(&ep->fid));
        OK(fi_close(&cntr->fid));
        OK(fi_close(&cq->fid));
        OK(fi_close(&av->fid));
    }

    /* Selective completion, op flags, recvmsg with data, setname. */
    {
        struct fid_av *av;
        struct fid_cq *cq;
        struct fid_ep *ep;
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
        OK(fi_av_open(domain, &av_attr, &av, NULL));
        OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
        OK(fi_endpoint(domain, info, &ep, NULL));
        struct sockaddr_in want = {.sin_family = AF_INET, .sin_port = 0,
                                   .sin_addr = {htonl(INADDR_LOOPBACK)}};
        OK(fi_setname(&ep->fid, &want, sizeof want));
        OK(fi_ep_bind(ep, &av->fid, 0));
        OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
        OK(fi_enable(ep));
        uint64_t flags = FI_TRANSMIT;
        OK(fi_control(&ep->fid, FI_GETOPSFLAG, &flags));
        CHECK(flags == 0, "tx op flags %lx", (unsigned long)flags);
        char name[64];
        size_t len = sizeof name;
        OK(fi_getname(&ep->fid, name, &len));
        fi_addr_t self;
        CHECK(fi_av_insert(av, name, 1, &self, 0, NULL) == 1, "insert");
        struct fi_cq_tagged_entry e;
        /* No FI_COMPLETION: no entry for the send or the receive. */
        char got[16];
        OK(fi_recv(ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, (void *)5));
        OK(fi_send(ep, "quiet", 6, NULL, self, (void *)6));
        CHECK(fi_cq_read(cq, &e, 1) == -FI_EAGAIN, "selective wrote an entry");
        CHECK(strcmp(got, "quiet") == 0, "data %s", got);
        flags = FI_TRANSMIT | FI_COMPLETION;
        OK(fi_control(&ep->fid, FI_SETOPSFLAG, &flags));
        struct iovec iov = {got, sizeof got};
        struct fi_msg msg = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                             .context = (void *)7};
        OK(fi_recvmsg(ep, &msg, FI_COMPLETION));
        struct iovec out = {"loud", 5};
        struct fi_msg smsg = {.msg_iov = &out, .iov_count = 1, .addr = self,
                              .context = (void *)8, .data = 9};
        OK(fi_sendmsg(ep, &smsg, FI_COMPLETION | FI_REMOTE_CQ_DATA));
        int seen = 0;
        for (int k = 0; k < 2; k++) {
            CHECK(fi_cq_read(cq, &e, 1) == 1, "entry %d", k);
            if (e.op_context == (void *)7) {
                seen |= 1;
                CHECK(e.data == 9 && e.len == 5, "recvmsg entry");
            }
            if (e.op_context == (void *)8)
                seen |= 2;
        }
        CHECK(seen == 3 && strcmp(got, "loud") == 0, "both completions");
        OK(fi_close(&ep->fid));
        OK(fi_close(&cq->fid));
        OK(fi_close(&av->fid));
    }

    /* FI_ADDR_STR: the address is the transport URL. */
    {
        hints->addr_format = FI_ADDR_STR;
        struct fi_info *sinfo = find(hints);
        CHECK(sinfo->addr_format == FI_ADDR_STR, "format");
        struct fid_domain *sdom;
        struct fid_av *av;
        struct fid_cq *cq;
        struct fid_ep *ep;
        OK(fi_domain(fabric, sinfo, &sdom, NULL));
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
        OK(fi_av_open(sdom, &av_attr, &av, NULL));
        OK(fi_cq_open(sdom, &cq_attr, &cq, NULL));
        OK(fi_endpoint(sdom, sinfo, &ep, NULL));
        OK(fi_ep_bind(ep, &av->fid, 0));
        OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
        OK(fi_enable(ep));
        char name[64];
        size_t len = sizeof name;
        OK(fi_getname(&ep->fid, name, &len));
        CHECK(strncmp(name, "udp://127.0.0.1:", 16) == 0, "name %s", name);
        const char *names[1] = {name};
        fi_addr_t self;
        CHECK(fi_av_insert(av, names, 1, &self, 0, NULL) == 1, "insert str");
        char got[8];
        struct fi_cq_entry e;
        OK(fi_trecv(ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, 1, 0, (void *)3));
        OK(fi_tinject(ep, "str", 4, self, 1));
        CHECK(fi_cq_sread(cq, &e, 1, NULL, 100) == -FI_ENOSYS, "sread without wait object");
        CHECK(fi_cq_read(cq, &e, 1) == 1 && e.op_context == (void *)3, "str recv");
        OK(fi_close(&ep->fid));
        OK(fi_close(&cq->fid));
        OK(fi_close(&av->fid));
        OK(fi_close(&sdom->fid));
        fi_freeinfo(sinfo);
    }

    OK(fi_close(&eq->fid));
    OK(fi_close(&domain->fid));
    OK(fi_close(&fabric->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("all checks passed\n");
    return 0;
}
