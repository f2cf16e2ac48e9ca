/*
 * Fuzz target: the loopback plugin's NIC address parser (lb_addr_parse in
 * plugins/loopback/lb_channel.c), reached the way the core reaches it:
 * ops->peer_add(nic, bytes, len). Addresses that parse then go down the
 * in-process path (pid = ours; peer NIC found by id in the registry) or the
 * cross-process path (memfd channel, connect and hello to the named
 * abstract socket; the harness listens on "te-lb-fuzz-peer" and drains).
 *
 * Properties:
 *  - no memory error or leak;
 *  - failure: -EINVAL/-ECONNREFUSED/... with a message through set_error,
 *    and no peer added (the NIC's peer table is unchanged);
 *  - success: a non-zero handle that peer_remove() accepts exactly once.
 */
#include "fuzz_lb_common.h"

#define FZ_NIC_ID 0x1122334455667788ull
#define FZ_PEER_NAME "te-lb-fuzz-peer"

static int fz_listener = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_setup("8");
    fz_listener = fz_listen_abstract(FZ_PEER_NAME);
    return 0;
}

static uint32_t live_peers(const lb_nic *nic)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < nic->npeers; i++)
        n += nic->peers[i] != NULL;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_ops)
        LLVMFuzzerInitialize(NULL, NULL);
    lb_nic *nic = fz_nic_open(0, 8, FZ_NIC_ID);
    /* The parser must not trust its input to be aligned or padded. */
    uint8_t *copy = malloc(size ? size : 1);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data, size);

    unsigned nerr = fz_nerr;
    te_plugin_peer h = 0;
    int rc = fz_ops->peer_add(nic, size ? copy : NULL, size, &h);
    if (rc < 0) {
        FUZZ_CHECK(rc == -EINVAL || rc == -ECONNREFUSED || rc == -ENOMEM ||
                   rc == -ENOENT || rc == -EAGAIN || rc == -EPERM ||
                   rc == -EACCES || rc == -ETIMEDOUT);
        FUZZ_CHECK(live_peers(nic) == 0);
        if (rc != -ENOMEM)
            FUZZ_CHECK(fz_nerr > nerr);
    } else {
        FUZZ_CHECK(rc == 0 && h != 0);
        FUZZ_CHECK(live_peers(nic) == 1);
        FUZZ_CHECK(fz_ops->peer_remove(nic, h) == 0);
        FUZZ_CHECK(fz_ops->peer_remove(nic, h) == -EINVAL);
        FUZZ_CHECK(live_peers(nic) == 0);
    }
    /* A NULL out pointer is refused before anything else. */
    FUZZ_CHECK(fz_ops->peer_add(nic, copy, size, NULL) == -EINVAL);
    fz_ops->nic_close(nic);
    /* Drop whatever reached the harness's listener. */
    for (int i = 0; i < 64; i++) {
        int fd = accept4(fz_listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break;
        char buf[64];
        union {
            char b[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } cm;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = cm.b, .msg_controllen = sizeof cm.b};
        if (recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) > 0)
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                    for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                        int x;
                        memcpy(&x, CMSG_DATA(c) + k * sizeof(int), sizeof x);
                        close(x);
                    }
        close(fd);
    }
    free(copy);
    return 0;
}
