"""perfbook.core"""
