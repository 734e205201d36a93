"""perfbook.dev"""
