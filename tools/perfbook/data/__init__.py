"""perfbook.data"""
