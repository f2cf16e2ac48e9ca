/*
 * Analytic model of one weight update, fed with the real schedule.
 *
 * Every trainer runs a pipeline (gather -> fuse/quantise -> write) whose
 * stages overlap, so its time is that of its busiest resource plus the
 * time to fill the pipeline once (the first param must be gathered and
 * quantised before the first write leaves). Resources:
 *   trainer TX   bytes it writes + bytes other trainers read from it
 *   trainer RX   bytes it gathers from the others
 *   receiver RX  bytes written into an inference GPU (the slowest one)
 *   submit       CPU time to post its writes and gather reads
 *   quantise     fuse + quantise of the params it owns
 *   h2d          host -> device copy of its shard (0 when on the GPU)
 * With target_charged (the loopback plugin's bandwidth cap charges only
 * the NIC where bytes land), a trainer's NIC is charged for the reads it
 * serves, and the writes it sends are charged at the receivers.
 */
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

int te_wt_simulate(const te_wt_model *m, const te_wt_sharding *sh,
                   const te_wt_schedule *s, const te_wt_sim_params *p,
                   te_wt_sim_result *o)
{
    wt_error_clear();
    memset(o, 0, sizeof(*o));
    if (p->nic_gbps <= 0 || !p->nics)
        return wt_fail(-EINVAL, "simulate: nic_gbps and nics must be > 0");
    uint32_t T = s->trainers, R = sh->layout.ranks;
    double bw = p->nic_gbps * p->nics * 1e9 / 8; /* bytes/s per GPU */
    double *tx = calloc(T, sizeof(double)), *rx = calloc(T, sizeof(double));
    double *sub = calloc(T, sizeof(double)), *qin = calloc(T, sizeof(double));
    double *fill = calloc(T, sizeof(double)), *rrx = calloc(R, sizeof(double));
    if (!tx || !rx || !sub || !qin || !fill || !rrx) {
        free(tx); free(rx); free(sub); free(qin); free(fill); free(rrx);
        return wt_fail(-ENOMEM, "out of memory");
    }
    for (uint64_t w = 0; w < s->nwrites; w++) {
        const te_wt_slice *sl = &sh->slices[s->writes[w].slice];
        if (!p->target_charged)
            tx[s->writes[w].trainer] += (double)sl->bytes;
        rrx[sl->rank] += (double)sl->bytes;
        sub[s->writes[w].trainer] += p->write_overhead_us * 1e-6;
    }
    for (uint64_t w = 0; w < s->nwrites; w++) {
        if (!wt_gathers(sh, s, w))
            continue;
        uint32_t owner = s->writes[w].trainer;
        uint32_t q = sh->slices[s->writes[w].slice].param;
        double in = (double)wt_param_input_bytes(m, sh, q);
        double g = (double)wt_gather_bytes(m, sh, q, T, owner);
        if (!p->target_charged)
            rx[owner] += g;
        qin[owner] += in;
        /* Served reads: every other trainer's part of each member. */
        const te_wt_param *pp = &sh->params[q];
        for (uint32_t i = 0; i < pp->members; i++) {
            const te_wt_tensor *t = &m->tensors[sh->members[pp->first_member + i]];
            for (uint32_t r = 0; r < T; r++) {
                uint64_t b, e;
                te_wt_fsdp_range(t, T, r, &b, &e);
                if (e == b)
                    break; /* later ranks hold nothing of it either */
                if (r == owner)
                    continue;
                tx[r] += (double)(e - b);
                sub[owner] += p->read_overhead_us * 1e-6;
            }
        }
    }
    for (uint32_t t = 0; t < T; t++) {
        if (s->trainer_first[t] == s->trainer_first[t + 1])
            continue;
        /* The first param of the trainer's order fills its pipeline. */
        uint32_t q = sh->slices[s->writes[s->trainer_first[t]].slice].param;
        double in = (double)wt_param_input_bytes(m, sh, q);
        fill[t] = (double)wt_gather_bytes(m, sh, q, T, t) / bw +
                  (p->quant_gbps > 0 ? in / (p->quant_gbps * 1e9) : 0);
    }
    double worst_tx = 0, worst_rx = 0, worst_sub = 0, worst_q = 0, worst_rrx = 0;
    double worst_fill = 0, worst_h2d = 0;
    for (uint32_t t = 0; t < T; t++) {
        if (tx[t] / bw > worst_tx) worst_tx = tx[t] / bw;
        if (rx[t] / bw > worst_rx) worst_rx = rx[t] / bw;
        if (sub[t] > worst_sub) worst_sub = sub[t];
        if (p->quant_gbps > 0 && qin[t] / (p->quant_gbps * 1e9) > worst_q)
            worst_q = qin[t] / (p->quant_gbps * 1e9);
        if (fill[t] > worst_fill) worst_fill = fill[t];
        if (p->h2d_gbps > 0) {
            double h = (double)te_wt_fsdp_bytes(m, T, t) / (p->h2d_gbps * 1e9);
            if (h > worst_h2d) worst_h2d = h;
        }
    }
    for (uint32_t r = 0; r < R; r++)
        if (rrx[r] / bw > worst_rrx) worst_rrx = rrx[r] / bw;
    struct { double v; const char *name; } terms[] = {
        {worst_tx, "trainer NIC TX (writes out + reads served)"},
        {worst_rx, "trainer NIC RX (gather reads)"},
        {worst_rrx, "receiver NIC RX (writes in)"},
        {worst_sub, "CPU submission (per-op overhead)"},
        {worst_q, "fuse + quantise"},
        {worst_h2d, "host-to-device copy"},
    };
    double best = 0;
    o->bound = terms[0].name;
    for (size_t i = 0; i < sizeof(terms) / sizeof(terms[0]); i++)
        if (terms[i].v > best) {
            best = terms[i].v;
            o->bound = terms[i].name;
        }
    o->trainer_tx_s = worst_tx;
    o->trainer_rx_s = worst_rx;
    o->receiver_rx_s = worst_rrx;
    o->submit_s = worst_sub;
    o->quant_s = worst_q;
    o->fill_s = worst_fill;
    o->seconds = best + worst_fill;
    free(tx); free(rx); free(sub); free(qin); free(fill); free(rrx);
    return 0;
}
