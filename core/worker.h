/*
 * Shared by the worker's files (worker.c loop, post.c posting, poll.c
 * completions, outcome.c request outcomes). Everything here runs on a
 * group's worker thread only.
 */
#ifndef TE_CORE_WORKER_H
#define TE_CORE_WORKER_H

#include "engine_internal.h"
#include "te_clock.h"

#define TE_POST_BATCH 32
#define TE_POLL_BATCH 64
#define TE_SUBMIT_BATCH 64
#define TE_EVENT_BATCH 128

/* Events gathered during one loop turn, flushed together. */
struct turn {
    struct te_cb_event ev[TE_EVENT_BATCH];
    size_t nev;
    te_completion cq[TE_EVENT_BATCH];
    size_t ncq;
    int did_work;
    uint64_t now_ns;        /* the clock, read at most once per turn:
                             * te_turn_now(), never directly */
    uint64_t next_check_ns; /* next deadline / liveness scan */
    uint64_t next_hb_ns;    /* next heartbeat scan (UINT64_MAX: no peer
                             * watched) */
    uint64_t hb_period_ns;  /* engine.heartbeat_ms in ns (0: off) */
    uint32_t arm_refused;   /* idle blocks a NIC refused (wait_arm
                             * -EAGAIN) since a turn last did work */
    uint64_t tick_seen;     /* te_turn_clock_due(): the coarse clock when */
    uint32_t turns_unread;  /* the precise one was last read, turns since */
    /* Peers reported closed in order during this turn, failed only after
     * every NIC was polled once more (te_turn_close_peers). */
    struct te_peer_entry *closing[8];
    uint32_t nclosing;
};

static inline uint64_t te_now_ns(void) { return te_clock_ns(); }

/* A new turn: the clock is read again on first use. (A caller spinning
 * on te_progress runs millions of empty turns; each read is 25-30 ns on
 * this project's VMs, a sixth of such a turn.) */
static inline void te_turn_tick(struct turn *t) { t->now_ns = 0; }

/* The turn's time, read on first use (0 is no time the clock returns
 * after boot). */
static inline uint64_t te_turn_now(struct turn *t)
{
    if (!t->now_ns)
        t->now_ns = te_now_ns();
    return t->now_ns;
}

/* Whether a turn that has not read the clock should, to see if a timed
 * scan is due: every 16th such turn, or once a timer tick passed since
 * the last reading. A scan is then late by at most 15 turns within one
 * tick (a few us when spinning, at most a tick when turns are far apart),
 * and an idle turn costs a coarse read instead of a precise one. */
static inline int te_turn_clock_due(struct turn *t)
{
    if (t->now_ns)
        return 1;
    uint64_t tick = te_clock_tick_ns();
    if (tick == t->tick_seen && ++t->turns_unread < 16)
        return 0;
    t->tick_seen = tick;
    t->turns_unread = 0;
    return 1;
}

/* A peer is watched on a NIC from now on (added, with keyless probes; or
 * written to there for the first time, or since its place was
 * forgotten): it can fall due for a heartbeat a period from now, so the
 * scan, which sleeps while nothing is watched, must run by then. */
static inline void te_heartbeat_watch(struct turn *t)
{
    uint64_t due = te_turn_now(t) + t->hb_period_ns;
    if (t->hb_period_ns && due < t->next_hb_ns)
        t->next_hb_ns = due;
}

/* outcome.c */
void te_turn_flush(struct te_engine *e, struct turn *t);
/* An orderly close (PEER_DOWN -ESHUTDOWN) of pe, reported on one NIC: it
 * may come before completions the peer's other NICs already hold, so the
 * peer's requests are failed at the end of the turn, after one more poll
 * of every NIC (te_turn_close_peers), not at once. */
void te_peer_closing(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_peer_entry *pe, const char *why);
void te_turn_close_peers(struct te_engine *e, struct te_group *g,
                         struct turn *t);
struct te_cb_event *te_turn_event(struct te_engine *e, struct turn *t);
/* Record the request's first error (later ones are ignored). */
void te_req_fail(struct te_req *q, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold));
/* Start tracking an accepted request (in-flight list, deadline). */
void te_req_track(struct te_group *g, struct turn *t, struct te_req *q);
/* Hand the completion out now; the request stays tracked until every
 * operation the transport holds has come back. */
void te_req_deliver(struct te_engine *e, struct turn *t, struct te_req *q);
/* If every operation is accounted for: deliver (once) and free. */
void te_req_settle(struct te_engine *e, struct turn *t, struct te_req *q);
/* Declare a peer down: fail its queued and in-flight requests. */
void te_peer_down(struct te_engine *e, struct te_group *g, struct turn *t,
                  struct te_peer_entry *pe, int status, const char *why);
/* Request deadlines and peer liveness; cheap unless a scan is due. */
void te_worker_check(struct te_engine *e, struct te_group *g, struct turn *t);

/* heartbeat.c: probe idle peers (engine.heartbeat_ms) and take the
 * answers (completions tagged TE_CTX_HEARTBEAT). */
void te_heartbeat_send(struct te_engine *e, struct te_group *g, struct turn *t);
void te_heartbeat_done(struct te_engine *e, struct te_group *g, struct turn *t,
                       const struct te_plugin_cq_entry *ce);
/* A peer was added (live): with engine.heartbeat_keyless it is watched on
 * one NIC from now on, written to or not. */
void te_heartbeat_added(struct te_engine *e, struct te_group *g,
                        struct turn *t, struct te_peer_entry *pe);

/* post.c */
void te_post_accept(struct te_engine *e, struct te_group *g, struct turn *t,
                    struct te_req *q);
void te_post_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                 struct te_nic *n);
/* Fail the queued (not yet posted) work towards a peer. */
void te_post_fail_peer(struct te_engine *e, struct te_group *g,
                       struct turn *t, struct te_peer_entry *pe, int status,
                       const char *why);

/* poll.c */
void te_poll_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                 uint32_t nic);
void te_repost_recvs(struct te_engine *e, struct te_group *g,
                     struct te_nic *n);
te_peer te_peer_of(struct te_group *g, uint32_t nic, te_plugin_peer pp);

#endif
