"""virtio_blk_latency: one request across the layers, on one time axis (collect runs this on
every boot's traces, before the next boot).

  match.py   each layer's events (parse's frames) cut into one row per request and matched to
             the benchmark's requests by the offset they read
  align.py   the guest's TSC put on the host's with a causality bracket, QEMU's gettimeofday()
             stamps with a calibration line checked by another bracket

Pure: frames and arrays in, frames and numbers out; tested on the fixtures in
tests/fixtures/virtio_blk_latency.
"""
