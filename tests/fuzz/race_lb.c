/*
 * Race reproducers for the loopback plugin: a hostile process rewrites
 * channel memory WHILE the NIC reads it, which a single-threaded fuzz target
 * cannot do. A second thread plays that process. Not a ctest (each run is a
 * probabilistic experiment); build with the asan preset and run:
 *
 *   cmake --build build-asan --target fuzz_race_lb
 *   build-asan/tests/fuzz_race_lb resp 20000   # LB-3
 *   build-asan/tests/fuzz_race_lb cap 20000    # LB-4
 *
 * Exit 1 and a message (or an ASan report) when the race was won, i.e. the
 * plugin used a value other than the one it checked; exit 0 when the given
 * number of attempts found nothing.
 *
 *  resp: the initiator checks a response's slot index against its queue
 *        depth, then (after formatting an error message) re-reads the index
 *        from shared memory to free the slot: an index flipped in between
 *        makes it write past nic->slots (heap-buffer-overflow).
 *  cap:  the target validates the channel capacity in the hello's memory,
 *        then re-reads it to build its ring views: a capacity flipped in
 *        between gives ring masks far larger than the mapping.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fuzz_lb_common.h"

#define FAKE_TGT_NAME "te-lb-race-tgt"

static _Atomic int stop;
static _Atomic(uint32_t *) flip_word;
static _Atomic unsigned long flip_epoch, flip_ack;
static uint32_t flip_a, flip_b;

static void *flipper(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        uint32_t *w = atomic_load(&flip_word);
        if (!w) {
            atomic_store(&flip_ack, atomic_load(&flip_epoch));
            continue;
        }
        *(volatile uint32_t *)w = flip_a;
        *(volatile uint32_t *)w = flip_b;
    }
    return NULL;
}

static void flip_start(uint32_t *w, uint32_t a, uint32_t b)
{
    flip_a = a;
    flip_b = b;
    atomic_store(&flip_word, w);
}

/* Returns once the flipper no longer touches the word. */
static void flip_stop(void)
{
    atomic_store(&flip_word, NULL);
    unsigned long e = atomic_fetch_add(&flip_epoch, 1) + 1;
    while (atomic_load(&flip_ack) != e)
        sched_yield();
}

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

/* LB-3: flip a response's slot between a live slot and qd (one past the
 * end of nic->slots) while the initiator completes it. */
static int race_resp(long attempts)
{
    const uint32_t qd = 16;
    int lfd = fz_listen_abstract(FAKE_TGT_NAME);
    lb_nic *nic = fz_nic_open(0, qd, 0x1111);
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
    a.pid = (uint32_t)fz_child;
    a.nic_id = 0x2222;
    snprintf(a.sock_name, sizeof a.sock_name, "%s", FAKE_TGT_NAME);
    te_plugin_peer peer;
    FUZZ_CHECK(fz_ops->peer_add(nic, &a, sizeof a, &peer) == 0);
    struct lb_hello h;
    int mfd, tfd = accept_hello(lfd, &h, &mfd);
    struct lb_shm *shm = mmap(NULL, h.shm_size, PROT_READ | PROT_WRITE,
                              MAP_SHARED, mfd, 0);
    FUZZ_CHECK(shm != MAP_FAILED);
    uint32_t cap = shm->cap;
    struct lb_ring req, resp;
    fz_views(shm, cap, &req, &resp, 0);

    pthread_t th;
    pthread_create(&th, NULL, flipper, NULL);
    struct te_plugin_cq_entry ev[64];
    long hits = 0;
    for (long i = 0; i < attempts; i++) {
        struct te_plugin_op op = {.kind = TE_POP_WRITE, .peer = peer, .mr = lmr,
                                  .local_addr = fz_mem(FZ_MR0_OFF), .len = 8,
                                  .remote_addr = 0x1000, .rkey = 7,
                                  .context = (uint64_t)i};
        FUZZ_CHECK(fz_ops->post(nic, &op, 1) == 1);
        FUZZ_CHECK(lb_ring_cons_avail(&req, UINT64_MAX) == 1);
        const struct lb_req *r = lb_ring_cons_slot(&req, 0);
        uint32_t slot = r->slot, gen = r->gen;
        lb_ring_cons_advance(&req, 1);
        /* Answer it (status -EACCES: the path that formats a message)
         * until the initiator takes it; the flipper moves the slot. */
        int done = 0;
        for (int tries = 0; tries < 64 && !done; tries++) {
            FUZZ_CHECK(lb_ring_prod_room(&resp));
            struct lb_resp *e = (struct lb_resp *)lb_ring_prod_next(&resp);
            struct lb_resp a = {.slot = slot, .gen = gen, .status = -EACCES,
                                .reason = LB_R_BOUNDS};
            lb_ring_prod_push(&resp, &a, sizeof a);
            /* Published: the flipper rewrites the slot under the reader,
             * as a hostile target would. */
            flip_start(&e->slot, slot, qd);
            int n = fz_ops->poll(nic, ev, 64);
            flip_stop();
            for (int k = 0; k < n; k++)
                done |= ev[k].kind == TE_PCQ_LOCAL;
        }
        if (nic->free_slot >= qd && nic->free_slot != qd) {
            hits++;
            break;
        }
        if (nic->free_slot == qd && nic->outstanding == 0) {
            /* slot qd was "freed": the write went past nic->slots. */
            hits++;
            break;
        }
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    if (hits) {
        fprintf(stderr, "race_lb resp: RACE WON: the initiator freed slot %u of "
                "a %u-slot table (out-of-bounds write; LB-3)\n",
                nic->free_slot, qd);
        return 1;
    }
    atomic_store(&shm->tgt_busy, 0);
    close(tfd);
    fz_ops->peer_remove(nic, peer);
    fz_ops->nic_close(nic);
    munmap(shm, h.shm_size);
    close(mfd);
    close(lfd);
    printf("race_lb resp: %ld attempts, race not won\n", attempts);
    return 0;
}

/* LB-4: flip the capacity in a hello's channel memory between 1 (what the
 * mapping holds) and 65536 while the target validates and maps it. */
static int race_cap(long attempts)
{
    lb_nic *nic = fz_nic_open(1, 16, 0x3333);
    size_t size = lb_shm_size(1);
    pthread_t th;
    pthread_create(&th, NULL, flipper, NULL);
    long adopted = 0, hits = 0;
    for (long i = 0; i < attempts && !hits; i++) {
        struct lb_shm *shm;
        int mfd = fz_channel_memfd(1, size, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
                                   &shm);
        int fd = fz_connect_abstract(nic->addr.sock_name);
        FUZZ_CHECK(fd >= 0);
        struct lb_hello h = {LB_HELLO_MAGIC, LB_ADDR_VERSION, 1, 0, 0x4444,
                             0x3333, size};
        FUZZ_CHECK(fz_send_fds(fd, &h, sizeof h, &mfd, 1) == (ssize_t)sizeof h);
        flip_start(&shm->cap, 1, LB_MAX_QUEUE_DEPTH);
        lb_housekeeping(nic);
        flip_stop();
        for (uint32_t k = 0; k < nic->nin; k++) {
            struct lb_inbound *ib = nic->in[k];
            if (ib->req.mask != 0 || ib->resp.mask != 0 ||
                ib->resp.slots != (unsigned char *)ib->shm + sizeof(struct lb_shm) +
                                      LB_RING_ENTRY) {
                fprintf(stderr, "race_lb cap: RACE WON after %ld attempts: a "
                        "1-entry channel (%zu bytes mapped) got ring masks "
                        "%llu/%llu; responses would go %zu bytes past the "
                        "mapping (LB-4)\n", i + 1, size,
                        (unsigned long long)ib->req.mask,
                        (unsigned long long)ib->resp.mask,
                        (size_t)(ib->resp.slots - (unsigned char *)ib->shm) - size);
                hits++;
            }
        }
        adopted += nic->nin;
        /* Drop the channel: hang up and let housekeeping notice. */
        close(fd);
        for (uint32_t k = 0; k < nic->nin; k++)
            nic->in[k]->gone = true;
        while (nic->nin)
            lb_inbound_drop(nic, nic->in[0]);
        munmap(shm, size);
        close(mfd);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    if (hits)
        return 1;
    fz_ops->nic_close(nic);
    printf("race_lb cap: %ld attempts (%ld adopted), race not won\n", attempts,
           adopted);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "resp") && strcmp(argv[1], "cap"))) {
        fprintf(stderr, "usage: %s resp|cap ATTEMPTS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    fz_setup("16");
    return !strcmp(argv[1], "resp") ? race_resp(n) : race_cap(n);
}
