"""`paystream chaos`: drive signed webhooks through the real pipeline while its parts are
killed, then prove that nothing accepted was lost and nothing was applied twice."""
