/* Refused connections whose answer is out: what the peer still sends is read and dropped until it
 * closes (or a deadline), so a request arriving after the answer does not make the kernel reset
 * the connection before the peer read the answer. Bounded: past the cap a socket is closed. */
#ifndef TELO_GATEWAY_LINGER_H
#define TELO_GATEWAY_LINGER_H

#include <stddef.h>

struct ev_loop;
struct gw_lingering;

/* At most max sockets at once, each for at most seconds. Returns NULL when out of memory. */
struct gw_lingering *gw_lingering_new(struct ev_loop *loop, size_t max, double seconds);

/* Takes fd (connected, non-blocking, its answer written and its write side shut): it is read to
 * its end, or closed at once when the cap is reached or out of memory. */
void gw_lingering_add(struct gw_lingering *l, int fd);

/* Closes every socket and frees l. NULL is a no-op. */
void gw_lingering_free(struct gw_lingering *l);

#endif
