
ByJ²>