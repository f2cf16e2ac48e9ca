/* te-bench --test idleturn (test_idleturn.c): its own small command line. */
#ifndef TB_TEST_IDLETURN_H
#define TB_TEST_IDLETURN_H

/** Run --test idleturn: ns per te_progress() call that finds nothing on a
 *  caller-driven engine with one peer; exit status (2 = bad argument). */
int tb_idleturn_main(int argc, char **argv);

#endif
