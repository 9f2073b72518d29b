/* libFuzzer target: the gateway's trusted-proxy reading (gateway/proxies.c): a --trusted-proxies
 * list and an X-Forwarded-For value, as an operator and a client write them. The input is
 * "list\nxff". Whatever they hold, the client named is an address (a key and its text), and
 * never more of the header is read than GW_FORWARDED_HOPS entries. */
#include "fuzz_text.h"
#include "gateway/proxies.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (text == NULL)
        return 0;
    const char *xff = fuzz_second_line(text);
    struct gw_proxies *p = NULL;
    struct telo_err err;
    if (gw_proxies_parse("--trusted-proxies", text, &p, &err) != 0 && p != NULL)
        abort(); /* a refused list leaves nothing behind */
    struct sockaddr_in peer;
    memset(&peer, 0, sizeof(peer));
    peer.sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.0.5", &peer.sin_addr);
    char key[GW_ADDRESS_KEY_MAX], remote[GW_ADDRESS_KEY_MAX];
    int taken = gw_proxies_client(p, (const struct sockaddr *)&peer, xff, key, remote);
    if (taken < 0 || taken > GW_FORWARDED_HOPS || key[0] == '\0')
        abort();
    unsigned char bin[16];
    if (inet_pton(AF_INET, remote, bin) != 1 && inet_pton(AF_INET6, remote, bin) != 1)
        abort();
    if (p == NULL && (taken != 0 || strcmp(key, "10.0.0.5") != 0))
        abort(); /* nobody trusted: the header is never believed */
    gw_proxies_free(p);
    free(text);
    return 0;
}
