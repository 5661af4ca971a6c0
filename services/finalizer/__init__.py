"""finalizer"""
