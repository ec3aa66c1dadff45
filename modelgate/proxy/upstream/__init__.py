"""Provider clients: the pooled HTTP/1.1 client, the providers' clients, the built-in mock, and the models'
routing rows and their selection.
"""
