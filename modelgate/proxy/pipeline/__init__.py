"""The model API's request pipeline: the context, the plugin chain's base, the handler, the route table,
failover and the forwarder, error envelopes, local answers.
"""
