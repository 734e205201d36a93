"""perfbook.framework"""
