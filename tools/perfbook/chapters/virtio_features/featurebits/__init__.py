"""virtio_features: the virtio feature bits (the chapter's decoder, pure).

bits.py    the bit tables: every name, its C macro and where it comes from
decode.py  feature strings -> named bits
"""
