
ByJg>