"""Benchmarks; run each as a module from the project root: python -m benchmarks.core"""
