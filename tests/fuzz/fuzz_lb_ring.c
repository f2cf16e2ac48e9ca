/*
 * Fuzz target: ring entries a loopback NIC reads from channel memory that
 * another (possibly hostile) process writes (plugins/loopback/lb_engine.c,
 * lb_initiator.c, lb_ring.h). Byte 0 picks the side under attack:
 *
 *  even: the NIC is the TARGET. The harness is a cross-process initiator
 *        (valid hello, sealed memfd) that writes fuzzed request entries and
 *        ring indices; the NIC executes them against three registrations
 *        (read+write, write-only, read-only), a stale key and posted
 *        receives. Copies go to a sacrificial child process.
 *  odd:  the NIC is the INITIATOR. It posts WRITE/READ/SEND ops to a peer
 *        whose socket and channel memory the harness owns; the harness
 *        answers with fuzzed response entries, ring indices and state.
 *
 * Entries carry relocation bits (see reloc_req/reloc_resp) so that inputs
 * can name "the read-only region + offset" or "the slot of the 3rd request"
 * without knowing addresses, keys or generations.
 *
 * Properties (besides no memory error, leak or UB):
 *  target: every answered request matches an independent model of the key,
 *    access and bounds checks (a failed check is -EACCES and writes nothing:
 *    canaries around every region stay intact); an IMM is reported exactly
 *    for the WRITEs that succeeded with TE_POP_F_IMM; SENDs obey the receive
 *    buffers; no request is answered twice.
 *  initiator: every op post() accepted completes exactly once, whatever the
 *    peer writes, with status 0 or a negative errno; forged or replayed
 *    responses complete nothing; nothing stays outstanding after
 *    peer_remove().
 */
#include "fuzz_lb_common.h"

#define FZ_TGT_ID 0x1122334455667788ull
#define FZ_INIT_NIC_ID 0x99aabbccddeeff00ull
#define FZ_FAKE_TGT_ID 0x0123456789abcdefull
#define FZ_FAKE_TGT_NAME "te-lb-fuzz-tgt"
#define MAXREQ 512

static int fz_listener = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_setup("16");
    fz_listener = fz_listen_abstract(FZ_FAKE_TGT_NAME);
    return 0;
}

/* ================================================================ target */

struct sent {
    struct lb_req r;
    int expect;    /* 0: success or copy error; <0: that status exactly;
                      1: SEND (depends on receive buffers); 2: unknown */
    int answered;
    unsigned char inl[LB_INLINE_MAX]; /* an inline SEND's payload */
};

struct region {
    uint64_t rkey, base, len;
    uint32_t access;
    int live;
};

static int model(const struct region *rg, int nrg, const struct lb_req *r)
{
    uint32_t need;
    switch (r->kind) {
    case TE_POP_WRITE:
        if (!r->len && !r->rkey)
            return 0;
        need = TE_PMR_REMOTE_WRITE;
        break;
    case TE_POP_READ:
        need = TE_PMR_REMOTE_READ;
        break;
    case TE_POP_SEND:
        return 1;
    default:
        return -EINVAL;
    }
    for (int i = 0; i < nrg; i++) {
        if (!rg[i].live || rg[i].rkey != r->rkey)
            continue;
        if (!(rg[i].access & need))
            return -EACCES;
        if (r->remote_addr < rg[i].base)
            return -EACCES;
        uint64_t off = r->remote_addr - rg[i].base;
        if (off > rg[i].len || r->len > rg[i].len - off)
            return -EACCES;
        return 0;
    }
    return -EACCES;
}

/* Relocation bits in the entry's lap field (lb_ring_prod_push writes the
 * ring's own stamp there). */
#define RL_KEY 0x8000u   /* rkey := key[rkey % 5], remote_addr := base + (int32) */
#define RL_LOCAL 0x4000u /* local_addr := child's source + (int32)local_addr */
#define RL_DELAY 0x2000u /* keep not_before_ns (else cleared) */

static void reloc_req(struct lb_req *e, const struct region *rg, int nrg)
{
    if (e->lap & RL_KEY) {
        const struct region *g = &rg[e->rkey % (uint64_t)nrg];
        e->rkey = g->rkey;
        e->remote_addr = g->base + (uint64_t)(int64_t)(int32_t)e->remote_addr;
        e->len &= 0xffffffffu;
    }
    if (e->lap & RL_LOCAL)
        e->local_addr = (uint64_t)(uintptr_t)fz_mem(FZ_SRC_OFF) +
                        (uint64_t)(int64_t)(int32_t)e->local_addr;
    if (!(e->lap & RL_DELAY))
        e->not_before_ns = 0;
}

/* A copy the model cannot predict failed: from or to the sacrificial
 * child's memory, or an entry claiming the initiator's buffer is device
 * memory (lb_req.mem; cross-process device copies are refused). */
static int copy_failed(const struct lb_resp *a)
{
    return a->reason == LB_R_COPY || a->reason == LB_R_DEVICE;
}

static void run_target(struct fz_in *in)
{
    uint32_t cap = 1u << (fz_u8(in) % 8);
    lb_nic *nic = fz_nic_open(1, 16, FZ_TGT_ID);

    /* Registrations: rw, write-only, read-only, stale; receive buffers. */
    struct region rg[5];
    memset(rg, 0, sizeof rg);
    te_plugin_mr *mr[4], *gone;
    struct te_plugin_mr_info info;
    static const struct { size_t off, len; uint32_t access; } def[3] = {
        {FZ_MR0_OFF, FZ_MR0_LEN, TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ},
        {FZ_MR1_OFF, FZ_MR1_LEN, TE_PMR_REMOTE_WRITE},
        {FZ_MR2_OFF, FZ_MR2_LEN, TE_PMR_REMOTE_READ}};
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_MR1_OFF), FZ_MR1_LEN,
                              TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ,
                              TE_PMEM_HOST, 0, &gone, &info) == 0);
    rg[3] = (struct region){info.rkey, info.remote_base, FZ_MR1_LEN,
                            TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ, 0};
    FUZZ_CHECK(fz_ops->mr_dereg(nic, gone) == 0);
    for (int i = 0; i < 3; i++) {
        FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(def[i].off), def[i].len,
                                  def[i].access, TE_PMEM_HOST, 0, &mr[i],
                                  &info) == 0);
        rg[i] = (struct region){info.rkey, info.remote_base, def[i].len,
                                def[i].access, 1};
    }
    FUZZ_CHECK(rg[3].rkey != rg[0].rkey); /* a reused slot gets a new key */
    rg[4] = (struct region){0, 0, 0, 0, 0};
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_RECV_OFF), 4 * FZ_RECV_LEN,
                              TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &mr[3],
                              &info) == 0);
    unsigned nrecv = fz_u8(in) % 5;
    uint64_t recv_len[4];
    for (unsigned i = 0; i < nrecv; i++) {
        recv_len[i] = fz_u8(in) % (FZ_RECV_LEN + 1);
        struct te_plugin_op op = {.kind = TE_POP_RECV, .mr = mr[3],
                                  .local_addr = fz_mem(FZ_RECV_OFF + i * FZ_RECV_LEN),
                                  .len = recv_len[i], .context = 500 + i};
        FUZZ_CHECK(fz_ops->post(nic, &op, 1) == 1);
    }

    /* The channel, as an honest initiator would open it. */
    struct lb_shm *shm;
    size_t size = lb_shm_size(cap);
    int mfd = fz_channel_memfd(cap, size, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
                               &shm);
    shm->init_pid = 1;
    shm->init_nic_id = FZ_INIT_NIC_ID;
    int fd = fz_connect_abstract(nic->addr.sock_name);
    FUZZ_CHECK(fd >= 0);
    struct lb_hello h = {.magic = LB_HELLO_MAGIC, .version = LB_ADDR_VERSION,
                         .pid = 1, .nic_id = FZ_INIT_NIC_ID,
                         .target_nic_id = FZ_TGT_ID, .shm_size = size};
    FUZZ_CHECK(fz_send_fds(fd, &h, sizeof h, &mfd, 1) == (ssize_t)sizeof h);
    lb_housekeeping(nic);
    FUZZ_CHECK(nic->nin == 1);
    nic->in[0]->pid = (uint32_t)fz_child;

    struct lb_ring req, resp;
    fz_views(shm, cap, &req, &resp, 1);

    static struct sent sent[MAXREQ];
    uint32_t nsent = 0, imms = 0, imm_ok = 0, recvs_ok = 0, recv_evs = 0;
    unsigned recv_used = 0;
    int strict = 1;
    struct te_plugin_cq_entry ev[512];

    for (int round = 0; round < 4 && in->n; round++) {
        uint8_t ctl = fz_u8(in);
        uint32_t pending = nic->pending.count;
        uint32_t room = cap > pending ? cap - pending : 0;
        uint32_t n = (ctl & 0x3f) % (room + 1), entries = 0;
        for (uint32_t i = 0; i < n && nsent < MAXREQ; i++) {
            struct lb_req e;
            fz_bytes(in, &e, sizeof e);
            reloc_req(&e, rg, 5);
            e.slot = nsent;
            e.gen = 0x600d0000u + (uint32_t)round;
            if (e.not_before_ns)
                strict = 0; /* delayed: answered whenever, or never */
            /* An inline SEND's payload follows it (lb_req_conts). */
            uint32_t need = 1 + lb_req_conts(&e);
            if (entries + need > cap)
                break; /* this round's entries alone fill the ring */
            if (lb_ring_prod_free(&req, need) < need) { /* the target stopped */
                FUZZ_CHECK(!strict);
                break;
            }
            sent[nsent] = (struct sent){e, model(rg, 5, &e), 0, {0}};
            memcpy(sent[nsent].inl, &e.remote_addr, LB_INLINE_HEAD);
            if (need > 1) {
                unsigned char *pl = sent[nsent].inl + LB_INLINE_HEAD;
                fz_bytes(in, pl, e.len - LB_INLINE_HEAD);
                lb_ring_prod_push_cont(&req, &e, sizeof e, pl,
                                       e.len - LB_INLINE_HEAD);
            } else {
                lb_ring_prod_push(&req, &e, sizeof e);
            }
            entries += need;
            nsent++;
        }
        if (ctl & 0x80) { /* corrupt lap stamp: an entry seen early or
                           * late, or a stale one seen again */
            uint64_t v = fz_u64(in);
            __atomic_store_n(lb_ring_lap_at(&req, v >> 16), (uint16_t)v,
                             __ATOMIC_RELEASE);
            strict = 0;
        }
        if (ctl & 0x40) { /* corrupt consumer index of the responses */
            atomic_store(&shm->resp.head, fz_u64(in));
            strict = 0;
        }

        /* A poll takes requests up to LB_BATCH_BYTES of lengths (at least
         * one): with huge fuzzed lengths, one request per poll. */
        int nev = fz_poll(nic, ev, 512, (int)entries + 3);
        for (int i = 0; i < nev; i++) {
            FUZZ_CHECK(ev[i].kind == TE_PCQ_IMM || ev[i].kind == TE_PCQ_RECV);
            if (ev[i].kind == TE_PCQ_IMM) {
                imms++;
            } else {
                FUZZ_CHECK(ev[i].context >= 500 && ev[i].context < 500 + nrecv);
                recv_evs++;
            }
        }
        /* Read the answers. */
        uint64_t avail = lb_ring_cons_avail(&resp, UINT64_MAX);
        for (uint64_t k = 0; k < avail; k++) {
            struct lb_resp a;
            memcpy(&a, lb_ring_cons_slot(&resp, k), sizeof a);
            if (!strict)
                continue;
            FUZZ_CHECK(a.slot < nsent);
            struct sent *s = &sent[a.slot];
            FUZZ_CHECK(a.gen == s->r.gen);
            FUZZ_CHECK(!s->answered);
            s->answered = 1;
            FUZZ_CHECK(a.status <= 0 && a.status > -4096);
            if (s->expect < 0 && s->expect != 1) {
                FUZZ_CHECK(a.status == s->expect);
            } else if (s->expect == 0) {
                FUZZ_CHECK(a.status == 0 || (copy_failed(&a) && s->r.len != 0));
                if (a.status == 0 && s->r.kind == TE_POP_WRITE &&
                    (s->r.flags & TE_POP_F_IMM))
                    imm_ok++;
            } else if (s->expect == 1) { /* SEND: the oldest receive */
                FUZZ_CHECK(recv_used < nrecv);
                uint64_t cap_len = recv_len[recv_used++];
                int inl = (s->r.mem & LB_MEM_INLINE) != 0;
                if (s->r.len > cap_len || (inl && s->r.len > LB_INLINE_MAX))
                    FUZZ_CHECK(a.status == -EMSGSIZE);
                else
                    FUZZ_CHECK(a.status == 0 || copy_failed(&a));
                if (a.status == 0)
                    recvs_ok++;
                /* An inline payload arrives as sent, from the ring. */
                if (a.status == 0 && inl)
                    FUZZ_CHECK(memcmp(fz_mem(FZ_RECV_OFF + (recv_used - 1) *
                                                              FZ_RECV_LEN),
                                      s->inl, s->r.len) == 0);
            }
        }
        lb_ring_cons_advance(&resp, avail);
    }
    if (strict) {
        FUZZ_CHECK(imms == imm_ok);
        FUZZ_CHECK(recv_evs == recv_used);
        /* Every request is answered unless it is a SEND still waiting. */
        uint32_t unanswered = 0;
        for (uint32_t i = 0; i < nsent; i++)
            if (!sent[i].answered) {
                FUZZ_CHECK(sent[i].r.kind == TE_POP_SEND);
                unanswered++;
            }
        FUZZ_CHECK(unanswered == nic->pending.count);
    }
    (void)recvs_ok;
    fz_mem_check();
    close(fd);
    fz_ops->nic_close(nic);
    munmap(shm, size);
    close(mfd);
}

/* ============================================================= initiator */

#define RS_SLOT 0x1u /* slot/gen := those of request (slot % nreq) */

static int accept_hello(int lfd, struct lb_hello *h, int *mfd)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {h, sizeof *h};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.b, .msg_controllen = sizeof cm.b};
    FUZZ_CHECK(recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof *h);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    FUZZ_CHECK(c && c->cmsg_type == SCM_RIGHTS);
    memcpy(mfd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static void run_initiator(struct fz_in *in)
{
    uint32_t qd = 1u << (fz_u8(in) % 5);
    lb_nic *nic = fz_nic_open(2, qd, FZ_INIT_NIC_ID);
    te_plugin_mr *lmr;
    struct te_plugin_mr_info info;
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_MR0_OFF), FZ_MR0_LEN,
                              TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &lmr,
                              &info) == 0);

    struct lb_addr a;
    memset(&a, 0, sizeof a);
    a.magic = LB_ADDR_MAGIC;
    a.version = LB_ADDR_VERSION;
    a.size = sizeof a;
    a.pid = (uint32_t)fz_child; /* another process: the memfd path */
    a.nic_index = 3;
    a.nic_id = FZ_FAKE_TGT_ID;
    snprintf(a.sock_name, sizeof a.sock_name, "%s", FZ_FAKE_TGT_NAME);
    te_plugin_peer peer;
    FUZZ_CHECK(fz_ops->peer_add(nic, &a, sizeof a, &peer) == 0);
    struct lb_hello h;
    int mfd;
    int tfd = accept_hello(fz_listener, &h, &mfd);
    FUZZ_CHECK(h.magic == LB_HELLO_MAGIC && h.target_nic_id == FZ_FAKE_TGT_ID);
    struct lb_shm *shm = mmap(NULL, h.shm_size, PROT_READ | PROT_WRITE,
                              MAP_SHARED, mfd, 0);
    FUZZ_CHECK(shm != MAP_FAILED);
    uint32_t cap = shm->cap;
    FUZZ_CHECK(shm->magic == LB_SHM_MAGIC && cap && !(cap & (cap - 1)) &&
               lb_shm_size(cap) <= h.shm_size);
    struct lb_ring req, resp;
    fz_views(shm, cap, &req, &resp, 0);

    /* Post ops; record which contexts post() accepted. */
    static uint8_t done[64];
    memset(done, 0, sizeof done);
    uint32_t nops = fz_u8(in) % (qd + 3), accepted = 0;
    for (uint32_t i = 0; i < nops && accepted < 64; i++) {
        uint8_t k = fz_u8(in);
        struct te_plugin_op op = {
            .kind = TE_POP_WRITE + k % 3, .flags = (k >> 2) & 1,
            .peer = peer, .mr = lmr, .local_addr = fz_mem(FZ_MR0_OFF),
            .len = fz_u8(in), .remote_addr = 0x1000, .rkey = 7,
            .imm = k, .context = accepted};
        int rc = fz_ops->post(nic, &op, 1);
        FUZZ_CHECK(rc == 0 || rc == 1);
        accepted += (uint32_t)rc;
    }

    struct te_plugin_cq_entry ev[256];
    int dirty = 0;
    for (int round = 0; round < 4 && in->n; round++) {
        uint8_t ctl = fz_u8(in);
        /* The requests the initiator pushed, as the target sees them. */
        struct { uint32_t slot, gen; } rq[64];
        uint64_t ravail = lb_ring_cons_avail(&req, UINT64_MAX);
        uint32_t nrq = 0;
        for (uint64_t k = 0; k < ravail && nrq < 64; k++) {
            const struct lb_req *r = lb_ring_cons_slot(&req, k);
            rq[nrq].slot = r->slot;
            rq[nrq].gen = r->gen;
            nrq++;
        }
        uint32_t n = (ctl & 0x0f) % (cap + 1);
        for (uint32_t i = 0; i < n; i++) {
            struct lb_resp r;
            fz_bytes(in, &r, sizeof r);
            /* Known issue LB-2 (UB in the plugin's message for this
             * status): masked unless FUZZ_STRICT=1. */
            if (r.status == INT32_MIN && !fuzz_strict())
                r.status = INT32_MIN + 1;
            if ((r.reserved[0] & RS_SLOT) && nrq) {
                uint32_t j = r.slot % nrq;
                r.slot = rq[j].slot;
                r.gen = rq[j].gen;
            }
            if (!lb_ring_prod_room(&resp))
                break;
            lb_ring_prod_push(&resp, &r, sizeof r);
        }
        if (ctl & 0x80) { /* corrupt lap stamp */
            uint64_t v = fz_u64(in);
            __atomic_store_n(lb_ring_lap_at(&resp, v >> 16), (uint16_t)v,
                             __ATOMIC_RELEASE);
            dirty = 1;
        }
        if (ctl & 0x40) {
            atomic_store(&shm->req.head, fz_u64(in));
            dirty = 1;
        } else {
            lb_ring_cons_advance(&req, ravail);
        }
        if (ctl & 0x20)
            atomic_store(&shm->tgt_state, fz_u8(in) % 4);
        if (ctl & 0x10)
            lb_housekeeping(nic);
        int nev = fz_poll(nic, ev, 256, 2);
        for (int i = 0; i < nev; i++) {
            if (ev[i].kind == TE_PCQ_PEER_DOWN) {
                FUZZ_CHECK(ev[i].peer == peer);
                continue;
            }
            FUZZ_CHECK(ev[i].kind == TE_PCQ_LOCAL);
            FUZZ_CHECK(ev[i].context < accepted);
            FUZZ_CHECK(!done[ev[i].context]);
            FUZZ_KNOWN(ev[i].status <= 0 && ev[i].status > -4096, "LB-1");
            done[ev[i].context] = 1;
        }
    }
    (void)dirty;
    /* The harness is a target that stops being busy and hangs up. */
    atomic_store(&shm->tgt_busy, 0);
    close(tfd);
    FUZZ_CHECK(fz_ops->peer_remove(nic, peer) == 0);
    for (int r = 0; r < 4; r++) {
        int nev = fz_ops->poll(nic, ev, 256);
        FUZZ_CHECK(nev >= 0);
        for (int i = 0; i < nev; i++) {
            if (ev[i].kind == TE_PCQ_PEER_DOWN)
                continue;
            FUZZ_CHECK(ev[i].kind == TE_PCQ_LOCAL);
            FUZZ_CHECK(ev[i].context < accepted);
            FUZZ_CHECK(!done[ev[i].context]);
            FUZZ_KNOWN(ev[i].status <= 0 && ev[i].status > -4096, "LB-1");
            done[ev[i].context] = 1;
        }
    }
    for (uint32_t i = 0; i < accepted; i++)
        FUZZ_CHECK(done[i]);
    FUZZ_CHECK(nic->outstanding == 0);
    munmap(shm, h.shm_size);
    close(mfd);
    fz_ops->nic_close(nic);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_ops)
        LLVMFuzzerInitialize(NULL, NULL);
    fz_child_ensure();
    fz_mem_reset();
    struct fz_in in = {data, size};
    if (fz_u8(&in) & 1)
        run_initiator(&in);
    else
        run_target(&in);
    return 0;
}
