# overflowing_model.py SOURCE TARGET BLOCK: writes SOURCE (a network.bin) to TARGET with every value
# of one block (proj, bn0..bn3, tconv1..tconv4, "tconv1 bias", ...) set to +-3e38, its sign kept.
# The model stays finite, so it passes validation, but that layer's output overflows for any latent.
import array
import sys

source, target, block = sys.argv[1:4]
# Blocks in file order (generator/network.hpp), sizes in floats.
blocks = [("proj", 819200), ("proj bias", 8192), ("bn0", 2048), ("tconv1", 3276800), ("tconv1 bias", 256),
          ("bn1", 1024), ("tconv2", 819200), ("tconv2 bias", 128), ("bn2", 512), ("tconv3", 204800),
          ("tconv3 bias", 64), ("bn3", 256), ("tconv4", 4800), ("tconv4 bias", 3)]
if block not in dict(blocks):
    sys.exit("overflowing_model.py: no block named " + repr(block))
values = array.array("f")
with open(source, "rb") as f:
    values.frombytes(f.read())
offset = 0
for name, size in blocks:
    if name == block:
        for i in range(offset, offset + size):
            values[i] = 3e38 if values[i] >= 0 else -3e38
    offset += size
if offset != len(values):
    sys.exit("overflowing_model.py: %s holds %d floats, expected %d" % (source, len(values), offset))
with open(target, "wb") as f:
    f.write(values.tobytes())
