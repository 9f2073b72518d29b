/* libFuzzer target: telo.io.v1 client messages (JSON text frames such as
 * {"type":"resize","cols":C,"rows":R}) as the gateway parses them; a resize always comes out
 * clamped to 1..GW_SIZE_MAX_DIM. */
#include "gateway/proto.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gw_io_control c;
    if (gw_parse_io_control(data, size, &c) != 0)
        return 0;
    if (c.kind == GW_IO_RESIZE &&
        (c.cols < 1 || c.cols > GW_SIZE_MAX_DIM || c.rows < 1 || c.rows > GW_SIZE_MAX_DIM))
        abort();
    if (c.kind != GW_IO_RESIZE && c.kind != GW_IO_UNKNOWN)
        abort();
    return 0;
}
