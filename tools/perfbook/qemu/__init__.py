"""perfbook.qemu"""
