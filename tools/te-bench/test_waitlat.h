/* te-bench --test waitlat (test_waitlat.c): its own small command line. */
#ifndef TB_TEST_WAITLAT_H
#define TB_TEST_WAITLAT_H

/** Run --test waitlat: submit -> te_imm_wait with engine.waiter_progress on
 *  and off in one run; exit status (2 = bad argument). */
int tb_waitlat_main(int argc, char **argv);

#endif
