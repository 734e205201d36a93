"""perfbook.probes"""
