"""Rules -> causes -> symptoms -> layer scores -> verdict with hysteresis."""
