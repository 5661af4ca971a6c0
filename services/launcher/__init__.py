"""launcher"""
