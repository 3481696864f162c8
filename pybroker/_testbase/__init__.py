# pybroker._testbase
