/* The structures the program library (rt_head.h, generated code, rt_body.c) and the port loop
 * (cio.c) exchange. Both are compiled from this same text, so they agree by construction; RT_ABI is
 * checked at load against cemit.ABI. */
#ifndef P4INA_RT_ABI_H
#define P4INA_RT_ABI_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <stdint.h>

#define RT_ABI 1

/* one received frame handed to a program */
struct rt_frame {
    const uint8_t *data;
    uint32_t len;
    int32_t port;
};

/* one frame a program produced: bytes [off, off + len) of rt_outs.buf, for `port` */
struct rt_outdesc {
    uint64_t off;
    uint32_t len;
    int32_t port;
};

/* frames produced by a batch; grown by the program with realloc, owned by the caller */
struct rt_outs {
    uint8_t *buf;
    uint64_t cap, used;
    struct rt_outdesc *d;
    uint32_t n, dcap;
};

/* a program's batch entry point: frames in, outputs appended to `o` (the program locks itself) */
typedef int (*rt_batch_fn)(void *sw, const struct rt_frame *f, uint32_t n, struct rt_outs *o);

#endif
