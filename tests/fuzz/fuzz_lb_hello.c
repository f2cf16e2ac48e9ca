/*
 * Fuzz target: what a loopback NIC accepts from another process on its
 * abstract socket (plugins/loopback/lb_inbound.c, lb_hello_recv and
 * lb_shm_check): the hello message, the file descriptors attached to it,
 * the size and seals of the channel memory, and the channel memory itself
 * (header, ring indices and request entries the target then executes).
 *
 * Input: flags (u8), hello length selector (u8), channel memory size (u32),
 * the hello (40 bytes), then the channel memory image (header and entries).
 * Flag bits repair fields the fuzzer cannot guess so that the deeper paths
 * stay reachable: see F_* below.
 *
 * Properties:
 *  - no memory error or leak, no write outside the registered regions;
 *  - a rejected hello closes the connection and adds no channel;
 *  - an accepted hello adds exactly one channel, whose requests are then
 *    executed (copies go to the sacrificial child process) without harm;
 *  - nic_close() afterwards releases everything.
 */
#include "fuzz_lb_common.h"

#define FZ_NIC_ID 0x1122334455667788ull

enum {
    F_FD = 1u << 0,        /* attach a memfd */
    F_FD2 = 1u << 1,       /* attach a second descriptor */
    F_SEAL = 1u << 2,      /* seal shrink + grow + seal */
    F_FIX_ID = 1u << 3,    /* target_nic_id := the NIC's id */
    F_FIX_SIZE = 1u << 4,  /* shm_size := the memfd's size */
    F_FIX_MAGIC = 1u << 5, /* magic/version := the right ones */
    F_FIX_SHM = 1u << 6,   /* valid channel header (cap from the size) */
    F_PARTIAL_SEAL = 1u << 7, /* only F_SEAL_SHRINK */
};

static te_plugin_mr *fz_mrs[4];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_setup("16");
    return 0;
}

static void reg_regions(lb_nic *nic)
{
    struct te_plugin_mr_info info;
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_MR0_OFF), FZ_MR0_LEN,
                              TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ,
                              TE_PMEM_HOST, 0, &fz_mrs[0], &info) == 0);
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_MR1_OFF), FZ_MR1_LEN,
                              TE_PMR_REMOTE_WRITE, TE_PMEM_HOST, 0, &fz_mrs[1],
                              &info) == 0);
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_MR2_OFF), FZ_MR2_LEN,
                              TE_PMR_REMOTE_READ, TE_PMEM_HOST, 0, &fz_mrs[2],
                              &info) == 0);
    FUZZ_CHECK(fz_ops->mr_reg(nic, fz_mem(FZ_RECV_OFF), 4 * FZ_RECV_LEN,
                              TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &fz_mrs[3],
                              &info) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_ops)
        LLVMFuzzerInitialize(NULL, NULL);
    fz_child_ensure();
    fz_mem_reset();
    struct fz_in in = {data, size};
    unsigned flags = fz_u8(&in);
    unsigned lensel = fz_u8(&in);
    size_t shm_size = fz_u32(&in) % (lb_shm_size(LB_MAX_QUEUE_DEPTH) + 4096);
    struct lb_hello h;
    fz_bytes(&in, &h, sizeof h);

    lb_nic *nic = fz_nic_open(1, 16, FZ_NIC_ID);
    reg_regions(nic);
    /* Two receive buffers for SENDs. */
    struct te_plugin_op rv[2];
    memset(rv, 0, sizeof rv);
    for (int i = 0; i < 2; i++) {
        rv[i].kind = TE_POP_RECV;
        rv[i].mr = fz_mrs[3];
        rv[i].local_addr = fz_mem(FZ_RECV_OFF + (size_t)i * FZ_RECV_LEN);
        rv[i].len = FZ_RECV_LEN;
        rv[i].context = 900 + (uint64_t)i;
    }
    FUZZ_CHECK(fz_ops->post(nic, rv, 2) == 2);

    int fd = fz_connect_abstract(nic->addr.sock_name);
    FUZZ_CHECK(fd >= 0);

    /* Channel memory. */
    struct lb_shm *map = NULL;
    uint32_t cap = 0;
    if (flags & F_FIX_SHM) {
        cap = 1;
        while (cap < LB_MAX_QUEUE_DEPTH && lb_shm_size(cap * 2) <= shm_size)
            cap *= 2;
    }
    unsigned seals = 0;
    if (flags & F_SEAL)
        seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    else if (flags & F_PARTIAL_SEAL)
        seals = F_SEAL_SHRINK;
    int mfd = -1;
    if (flags & (F_FD | F_FD2)) {
        mfd = fz_channel_memfd(0, shm_size, 0, &map);
        if (map) {
            /* The rest of the input is the memory image. */
            size_t k = in.n < shm_size ? in.n : shm_size;
            memcpy(map, in.p, k);
            if (cap && shm_size >= lb_shm_size(cap)) {
                struct lb_shm hdr;
                memcpy(&hdr, map, sizeof hdr < k ? sizeof hdr : k);
                lb_shm_init(map, cap, shm_size);
                /* Keep the fuzzed ring indices: they are the attack. */
                if (k >= sizeof hdr) {
                    atomic_store(&map->req.head, atomic_load(&hdr.req.head));
                    atomic_store(&map->resp.head, atomic_load(&hdr.resp.head));
                }
            }
        }
        if (seals)
            FUZZ_CHECK(fcntl(mfd, F_ADD_SEALS, seals) == 0);
    }
    if (flags & F_FIX_ID)
        h.target_nic_id = FZ_NIC_ID;
    if (flags & F_FIX_SIZE)
        h.shm_size = shm_size;
    if (flags & F_FIX_MAGIC) {
        h.magic = LB_HELLO_MAGIC;
        h.version = LB_ADDR_VERSION;
    }
    int fds[2] = {mfd, -1}, nfds = 0;
    if (flags & F_FD)
        nfds = 1;
    if (flags & F_FD2) {
        fds[nfds++] = (flags & F_FD) ? open("/dev/null", O_RDONLY | O_CLOEXEC) : mfd;
    }
    size_t hlen = lensel < 0x80 ? sizeof h : lensel % (sizeof h + 24);
    uint8_t msg[sizeof h + 24];
    memset(msg, 0, sizeof msg);
    memcpy(msg, &h, sizeof h);
    ssize_t sent = fz_send_fds(fd, msg, hlen, fds, nfds);
    FUZZ_CHECK(sent == (ssize_t)hlen);
    if (nfds == 2 && (flags & F_FD))
        close(fds[1]);

    /* One housekeeping pass accepts the connection and reads the hello. */
    uint32_t nin0 = nic->nin;
    lb_housekeeping(nic);
    FUZZ_CHECK(nic->nhello == 0); /* the hello was there: never kept waiting */
    FUZZ_CHECK(nic->nin == nin0 || nic->nin == nin0 + 1);
    char buf[256];
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (nic->nin == nin0) {
        /* Rejected: closed by the NIC, after a refusal message when the
         * hello asked for authentication this engine has no key for. */
        if (r > 0)
            r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        FUZZ_CHECK(r == 0);
    } else {
        FUZZ_CHECK(r < 0 && errno == EAGAIN); /* adopted: stays open */
        struct lb_inbound *ib = nic->in[nic->nin - 1];
        FUZZ_CHECK(ib->pid == (uint32_t)getpid()); /* SO_PEERCRED, not h.pid */
        /* Let the copies go to the sacrificial process instead of us. */
        ib->pid = (uint32_t)fz_child;
        struct te_plugin_cq_entry ev[64];
        fz_poll(nic, ev, 64, 4);
        fz_mem_check();
    }
    close(fd);
    fz_ops->nic_close(nic);
    if (map)
        munmap(map, shm_size);
    if (mfd >= 0)
        close(mfd);
    return 0;
}
