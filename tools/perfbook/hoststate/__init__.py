"""perfbook.hoststate"""
