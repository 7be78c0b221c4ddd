
ByJÔ>