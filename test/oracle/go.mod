module localccm.test/oracle

go 1.26
